package integration_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestSmokeControlPlane proves the apiserver is real: the project's CRD
// serves create, get and watch, with schema defaults applied.
func TestSmokeControlPlane(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx := context.Background()

	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &databasev1alpha1.PostgreSQLInstanceList{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	inst := &databasev1alpha1.PostgreSQLInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: databasev1alpha1.PostgreSQLInstanceSpec{
			Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1"},
			AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "smoke-admin"},
		},
	}
	if err := cp.Client.Create(ctx, inst); err != nil {
		t.Fatal(err)
	}
	got := &databasev1alpha1.PostgreSQLInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "smoke"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Endpoint.Port != 5432 || got.Spec.Endpoint.SSLMode != databasev1alpha1.SSLModeVerifyFull || got.Spec.AdminCredentialRef.PasswordKey != "password" {
		t.Fatalf("CRD defaults not applied: %+v", got.Spec)
	}
	select {
	case ev := <-w.ResultChan():
		if o, ok := ev.Object.(*databasev1alpha1.PostgreSQLInstance); !ok || o.Name != "smoke" {
			t.Fatalf("unexpected watch event %v %T", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event for the created Instance")
	}
	// Schema validation is enforced by the real apiserver.
	bad := inst.DeepCopy()
	bad.ResourceVersion = ""
	bad.Name = "bad"
	bad.Spec.Endpoint.HostAddr = "not-an-ip"
	if err := cp.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "hostaddr") {
		t.Fatalf("want a hostaddr validation error, got %v", err)
	}
}

// TestSmokeJetStream proves JetStream is real: Nats-Msg-Id de-duplication and
// per-subject optimistic concurrency are enforced by the server (on the
// journal's stream name and subjects: the manager identity may use no
// other).
func TestSmokeJetStream(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: journal.DefaultStreamName, Subjects: []string{"ayatori.journal.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := js.Publish(ctx, "ayatori.journal.smoke.a", []byte("x"), jetstream.WithMsgID("same-id")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("same Nats-Msg-Id twice stored %d messages, want 1", info.State.Msgs)
	}
	if _, err := js.Publish(ctx, "ayatori.journal.smoke.a", []byte("y"), jetstream.WithExpectLastSequencePerSubject(0)); err == nil {
		t.Fatal("publish with a stale expected last subject sequence was accepted")
	} else {
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
			t.Fatalf("want wrong-last-sequence error, got %v", err)
		}
	}
	if _, err := js.Publish(ctx, "ayatori.journal.smoke.a", []byte("z"), jetstream.WithExpectLastSequencePerSubject(1)); err != nil {
		t.Fatalf("publish with the right expected sequence: %v", err)
	}
}

// TestSmokePostgresTLS proves PostgreSQL is real and TLS-only.
func TestSmokePostgresTLS(t *testing.T) {
	pg := integration.StartPostgres(t, integration.PostgresOptions{})
	ctx := context.Background()
	connect := func(t *testing.T, dsn string, lookup func(context.Context, string) ([]string, error)) error {
		t.Helper()
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if lookup != nil {
			cfg.LookupFunc = lookup
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		var ssl bool
		if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil {
			return err
		}
		if !ssl {
			t.Fatal("connection is not TLS")
		}
		return nil
	}
	base := "port=" + itoa(pg.Port) + " user=postgres dbname=postgres password=" + pg.SuperuserPassword + " connect_timeout=5 "
	t.Run("verify-full via host=localhost", func(t *testing.T) {
		if err := connect(t, base+"host=localhost sslmode=verify-full sslrootcert="+pg.CAFile, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("verify-full via hostaddr=127.0.0.1", func(t *testing.T) {
		// pgx has no hostaddr keyword: connecting to the IP verifies the
		// certificate's IP SAN, which is what libpq's hostaddr-only does.
		if err := connect(t, base+"host=127.0.0.1 sslmode=verify-full sslrootcert="+pg.CAFile, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("untrusted CA fails", func(t *testing.T) {
		if err := connect(t, base+"host=localhost sslmode=verify-full sslrootcert="+pg.UntrustedCAFile, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("want a certificate error, got %v", err)
		}
	})
	t.Run("wrong host name fails", func(t *testing.T) {
		// wrong.example resolves to the server, but the certificate does not name it.
		lookup := func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
		if err := connect(t, base+"host=wrong.example sslmode=verify-full sslrootcert="+pg.CAFile, lookup); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("want a certificate host-name error, got %v", err)
		}
	})
	t.Run("without TLS fails", func(t *testing.T) {
		if err := connect(t, base+"host=localhost sslmode=disable", nil); err == nil || !strings.Contains(err.Error(), "no encryption") {
			t.Fatalf("want pg_hba to refuse a non-TLS connection, got %v", err)
		}
	})
	t.Run("wrong-host certificate fails", func(t *testing.T) {
		if err := pg.ReplaceServerCert(pg.CA, []string{"wrong.example"}, []string{"192.0.2.1"}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return connect(t, base+"host=localhost sslmode=verify-full sslrootcert="+pg.CAFile, nil) != nil, nil
		})
		if err != nil {
			t.Fatal("server kept accepting verify-full after switching to a wrong-host certificate")
		}
		if err := pg.ReplaceServerCert(pg.CA, []string{"localhost"}, []string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("non-superuser admin role", func(t *testing.T) {
		if err := pg.CreateAdminRole(ctx, "ayatori_admin", "admin-pw-smoke", "CREATEROLE", "CREATEDB"); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return connect(t, pg.DSN("ayatori_admin", "admin-pw-smoke", "postgres"), nil) == nil, nil
		})
		if err != nil {
			t.Fatal("admin role cannot log in with verify-full")
		}
	})
}

// TestSmokePostgresRestartKeepsData: a server stopped (the process, or
// `docker stop` of the container) and started again on the same data
// directory or volume keeps every committed row, under both providers. (A
// kill may lose the last commits: the harness runs PostgreSQL with
// synchronous_commit off for speed.)
func TestSmokePostgresRestartKeepsData(t *testing.T) {
	pg := integration.StartPostgres(t, integration.PostgresOptions{})
	ctx := context.Background()
	exec := func(sql string, args ...any) (int, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
		if err != nil {
			return 0, err
		}
		defer c.Close(ctx)
		if len(args) == 0 && strings.HasPrefix(sql, "SELECT") {
			var n int
			err := c.QueryRow(ctx, sql).Scan(&n)
			return n, err
		}
		_, err = c.Exec(ctx, sql, args...)
		return 0, err
	}
	if _, err := exec("CREATE TABLE survives (n int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec("INSERT INTO survives SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := exec("SELECT count(*) FROM survives")
	if err != nil || n != 100 {
		t.Fatalf("after the restart: %d rows, %v", n, err)
	}
}

// TestSmokeOpenBaoKV proves the OpenBao-compatible server enforces KV v2 cas=0.
func TestSmokeOpenBaoKV(t *testing.T) {
	ob := integration.StartOpenBao(t)
	ctx := context.Background()
	c, err := ob.Client(ob.RootToken)
	if err != nil {
		t.Fatal(err)
	}
	kv := c.KVv2(integration.KVMount)
	opts := map[string]any{"cas": 0}
	if _, err := c.Logical().WriteWithContext(ctx, integration.KVMount+"/data/smoke/a", map[string]any{"data": map[string]any{"k": "v1"}, "options": opts}); err != nil {
		t.Fatalf("first cas=0 write: %v", err)
	}
	if _, err := c.Logical().WriteWithContext(ctx, integration.KVMount+"/data/smoke/a", map[string]any{"data": map[string]any{"k": "v2"}, "options": opts}); err == nil || !strings.Contains(err.Error(), "check-and-set") {
		t.Fatalf("second cas=0 write: want check-and-set rejection, got %v", err)
	}
	got, err := kv.Get(ctx, "smoke/a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "v1" || got.VersionMetadata.Version != 1 {
		t.Fatalf("got %v version %d, want v1 version 1", got.Data["k"], got.VersionMetadata.Version)
	}
	// Data survives a restart (file storage, unsealed again by the harness).
	ob.Stop()
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := kv.Get(ctx, "smoke/a"); err != nil || got.Data["k"] != "v1" {
		t.Fatalf("after restart: %v %v", got, err)
	}
}

// TestSmokeExternalSecrets proves ESO is real: an ExternalSecret for a KV v2
// key of its namespace produces the target Secret through the shipped store
// (ESO logs in with the namespace's ayatori-secrets-reader ServiceAccount).
func TestSmokeExternalSecrets(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{ExternalSecretsCRDs: true})
	ob := integration.StartOpenBao(t)
	eso := integration.StartExternalSecrets(t, cp, ob, integration.ExternalSecretsOptions{})
	ctx := context.Background()
	c, _ := ob.Client(ob.RootToken)
	key := integration.TenantBasePath + "/smoke/app"
	if _, err := c.KVv2(integration.KVMount).Put(ctx, key, map[string]any{"username": "app", "password": "smoke-canary"}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "smoke", Name: dbcontract.ReaderServiceAccount}}); err != nil {
		t.Fatal(err)
	}
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(integration.ExternalSecretGVK)
	es.SetNamespace("smoke")
	es.SetName("app")
	es.Object["spec"] = map[string]any{
		"refreshInterval": "10s",
		"secretStoreRef":  map[string]any{"kind": "ClusterSecretStore", "name": eso.StoreName},
		"target":          map[string]any{"name": "app-credentials"},
		"dataFrom":        []any{map[string]any{"extract": map[string]any{"key": key}}},
	}
	if err := cp.Client.Create(ctx, es); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return cp.Client.Get(ctx, client.ObjectKey{Namespace: "smoke", Name: "app-credentials"}, secret) == nil, nil
	})
	if err != nil {
		t.Fatalf("ESO did not produce the target Secret; ESO log:\n%s", integration.Tail(eso.LogPath, 30))
	}
	if string(secret.Data["username"]) != "app" || string(secret.Data["password"]) != "smoke-canary" {
		t.Fatalf("target Secret has keys %v", keys(secret.Data))
	}
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }
