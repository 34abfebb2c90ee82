package database_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	dbprojector "git.ddupan.top/panxiao81/ayatori/projectors/database"
)

const (
	controllerNS = "ayatori-system"
	// adminCanary is the admin password: it must never appear in logs,
	// Events, Conditions, CR dumps, metrics or the journal.
	adminCanary = "CANARY-admin-pw-5f2b9e"
)

// env is one set of real servers plus an in-process manager (Instance
// projector + PostgreSQL executor), shared by the tests of this package.
type env struct {
	cp      *integration.ControlPlane
	nats    *integration.NATS
	pg      *integration.Postgres
	store   *journal.Store
	pools   *pgexec.Pools
	logs    *syncBuffer
	cancel  context.CancelFunc
	done    chan error
	caFile  string
	cleanup []func()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	shared     *env
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	if stack != nil {
		stack.Close()
	}
	os.Exit(code)
}

// getEnv starts the shared environment on first use.
func getEnv(t *testing.T) *env {
	t.Helper()
	integration.Servers(t)
	sharedOnce.Do(func() { shared, sharedErr = startEnv() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func startEnv() (_ *env, err error) {
	e := &env{logs: &syncBuffer{}}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	ctx := context.Background()
	if e.cp, err = integration.NewControlPlane(integration.ControlPlaneOptions{}); err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, e.cp.Close)
	if e.nats, err = integration.NewNATS(integration.NATSOptions{}); err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, e.nats.Close)
	if e.pg, err = integration.NewPostgres(ctx, integration.PostgresOptions{LogStatements: true}); err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, e.pg.Close)
	e.caFile = e.pg.CAFile
	if err := e.pg.CreateAdminRole(ctx, "ayatori_admin", adminCanary, "CREATEROLE", "CREATEDB"); err != nil {
		return nil, err
	}
	if err := e.superExec(ctx, "GRANT CREATE ON DATABASE postgres TO ayatori_admin"); err != nil {
		return nil, err
	}
	if err := e.cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNS}}); err != nil {
		return nil, err
	}
	nc, err := e.nats.Connect(journal.IdentityManager)
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, nc.Close)
	key, err := integration.JournalSigningKey()
	if err != nil {
		return nil, err
	}
	if e.store, err = journal.Open(ctx, nc, journal.Config{Actor: "test-manager", Signer: key}); err != nil {
		return nil, err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(e.logs), zap.UseDevMode(true)))
	mgr, err := ctrl.NewManager(e.cp.Config, ctrl.Options{
		Scheme:                 e.cp.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{controllerNS: {}}},
		}},
	})
	if err != nil {
		return nil, err
	}
	router := dbprojector.NewOutcomeRouter(e.store)
	if err := mgr.Add(router); err != nil {
		return nil, err
	}
	r := &dbprojector.InstanceReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: e.store, Namespace: controllerNS,
		Recorder: mgr.GetEventRecorder("ayatori-manager"),
		Policy:   dbprojector.InstancePolicy{ResyncInterval: 2 * time.Second, RetryBase: 300 * time.Millisecond, RetryMax: 2 * time.Second, PendingRecheck: 5 * time.Second}}
	if err := r.SetupWithManager(mgr, router.Instances); err != nil {
		return nil, err
	}
	roots, err := pgexec.LoadCABundle(e.caFile)
	if err != nil {
		return nil, err
	}
	e.pools = pgexec.NewPools(roots, 4, 5*time.Second)
	ex := &pgexec.Executor{Pools: e.pools, Secrets: secretReader{c: mgr.GetAPIReader()}, Timeout: 10 * time.Second}
	dispatch, err := journal.NewDispatcher(dbcontract.Domain)
	if err != nil {
		return nil, err
	}
	if err := dispatch.HandleAll("postgresql", ex.Handlers()); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 2)
	go func() { e.done <- mgr.Start(mctx) }()
	go func() {
		e.done <- e.store.Consume(mctx, journal.ConsumerConfig{Durable: "test-executor", AckWait: 20 * time.Second,
			// A transient failure is redelivered (docs/decisions/0007): a
			// short budget makes an outage reach status in seconds.
			BackOff: []time.Duration{200 * time.Millisecond, time.Second}}, dispatch)
	}()
	return e, nil
}

func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		<-e.done
	}
	if e.pools != nil {
		e.pools.CloseAll()
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

type secretReader struct{ c client.Reader }

func (s secretReader) ReadSecret(ctx context.Context, name string) (map[string][]byte, string, error) {
	sec := &corev1.Secret{}
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: controllerNS, Name: name}, sec); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, "", pgexec.ErrSecretNotFound
		}
		return nil, "", err
	}
	return sec.Data, sec.ResourceVersion, nil
}

func (e *env) superExec(ctx context.Context, sql string, args ...any) error {
	c, err := pgx.Connect(ctx, e.pg.SuperuserDSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql, args...)
	return err
}

// adminSecret creates (or updates) an admin Secret in the controller namespace.
func (e *env) adminSecret(t *testing.T, name, user, password string) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controllerNS},
		Data: map[string][]byte{"username": []byte(user), "password": []byte(password)}}
	if err := e.cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// instance creates an Instance against the test server.
func (e *env) instance(t *testing.T, name, secret string, mutate func(*databasev1alpha1.PostgreSQLInstance)) *databasev1alpha1.PostgreSQLInstance {
	t.Helper()
	inst := &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: databasev1alpha1.PostgreSQLInstanceSpec{
			Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(e.pg.Port)},
			AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: secret},
		}}
	if mutate != nil {
		mutate(inst)
	}
	if err := e.cp.Client.Create(context.Background(), inst); err != nil {
		t.Fatal(err)
	}
	return inst
}

// waitReady waits until the Instance's Ready condition has the status and
// reason (reason "" = any) for its current generation.
func (e *env) waitReady(t *testing.T, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) *databasev1alpha1.PostgreSQLInstance {
	t.Helper()
	var last *databasev1alpha1.PostgreSQLInstance
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		inst := &databasev1alpha1.PostgreSQLInstance{}
		if err := e.cp.Client.Get(ctx, types.NamespacedName{Name: name}, inst); err != nil {
			return false, nil
		}
		last = inst
		for _, c := range inst.Status.Conditions {
			if c.Type == "Ready" && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == inst.Generation {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Instance %s never reached Ready=%s/%s; last status: %s\nmanager log tail:\n%s", name, status, reason, dumpStatus(last), tailLines(e.logs.String(), 20))
	}
	return last
}

func dumpStatus(i *databasev1alpha1.PostgreSQLInstance) string {
	if i == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s observedGeneration=%d/%d", i.Status.Phase, i.Status.ObservedGeneration, i.Generation)
	for _, c := range i.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s %q", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
