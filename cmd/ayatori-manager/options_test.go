package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parse(t *testing.T, args ...string) error {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return o.validate()
}

func TestFlagValidation(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := []string{"--namespace=ayatori-system", "--nats-url=nats://127.0.0.1:4222", "--nats-nkey=/run/nats/manager.nk",
		"--journal-signing-key=/run/keys/signing.pem", "--journal-trusted-keys=/run/keys/trusted", "--openbao-address=http://127.0.0.1:8200",
		"--openbao-auth-role=ayatori", "--external-secret-store-name=ayatori-openbao"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"defaults are valid", nil, ""},
		{"all openbao flags", []string{"--openbao-address=https://bao.home.arpa:8200/", "--openbao-consumer-address=https://bao.example",
			"--openbao-kv-mount=secret", "--openbao-tenant-base-path=apps/postgresql", "--postgresql-ca-bundle-path=" + ca}, ""},
		{"missing namespace", []string{"--namespace="}, "--namespace"},
		{"relative openbao URL", []string{"--openbao-address=bao:8200"}, "absolute http or https"},
		{"userinfo", []string{"--openbao-address=https://root:pw@bao"}, "user information"},
		{"plain HTTP OpenBao off loopback", []string{"--openbao-address=http://bao.home.arpa:8200"}, "plain HTTP to bao.home.arpa"},
		{"plain HTTP OpenBao allowed explicitly", []string{"--openbao-address=http://bao.home.arpa:8200", "--openbao-allow-plain-http"}, ""},
		{"query", []string{"--openbao-address=https://bao/?token=x"}, "query"},
		{"mount with leading slash", []string{"--openbao-kv-mount=/kv"}, "mount-relative"},
		{"dot segment", []string{"--openbao-tenant-base-path=a/../b"}, "'..'"},
		{"data layer in base path", []string{"--openbao-tenant-base-path=tenants/data"}, "KV v2 API segment"},
		{"zero timeout", []string{"--reconcile-timeout=0s"}, "--reconcile-timeout must be a positive duration"},
		// A default must stay valid whatever the other flags say: the
		// followed pause is capped at the longest, never refused for it.
		{"longest Observe pause below the followed default", []string{"--job-observe-max-interval=2s"}, ""},
		{"followed Observe pause above the longest", []string{"--job-observe-followed-interval=20s"}, ""},
		{"TTL workers zero", []string{"--job-ttl-workers=0"}, "--job-ttl-workers must be positive"},
		{"followed Observe pause zero", []string{"--job-observe-followed-interval=0s"}, "--job-observe-followed-interval must be a positive duration"},
		{"negative resync", []string{"--instance-resync-interval=-1s"}, "--instance-resync-interval"},
		{"retry max below base", []string{"--retry-base=10s", "--retry-max=1s"}, "--retry-max"},
		{"bad nats url", []string{"--nats-url=http://x"}, "--nats-url"},
		{"no NATS identity", []string{"--nats-nkey="}, "--nats-nkey (or --nats-creds) is required"},
		{"two NATS identities", []string{"--nats-creds=/run/nats/x.creds"}, "--nats-nkey and --nats-creds: give one"},
		{"JWT credentials instead of an NKey", []string{"--nats-nkey=", "--nats-creds=/run/nats/x.creds"}, ""},
		{"client certificate without key", []string{"--nats-tls-cert=/run/c.pem"}, "--nats-tls-cert and --nats-tls-key go together"},
		{"no signing key", []string{"--journal-signing-key="}, "--journal-signing-key is required"},
		{"no trusted keys", []string{"--journal-trusted-keys="}, "--journal-trusted-keys is required"},
		{"missing token file", []string{"--openbao-token-file=/nonexistent/token"}, "--openbao-token-file"},
		{"missing CA bundle", []string{"--postgresql-ca-bundle-path=/nonexistent/ca.pem"}, "not a readable file"},
		{"unknown projector", []string{"--projectors=instance,bogus"}, "unknown projector"},
		{"replicas", []string{"--journal-replicas=2"}, "--journal-replicas"},
		{"wildcard subject prefix", []string{"--journal-subject-prefix=ayatori.*"}, "--journal-subject-prefix"},
		{"full wildcard subject prefix", []string{"--journal-subject-prefix=>"}, "--journal-subject-prefix"},
		{"empty subject prefix token", []string{"--journal-subject-prefix=a..b"}, "--journal-subject-prefix"},
		{"empty subject prefix", []string{"--journal-subject-prefix="}, "--journal-subject-prefix"},
		{"dotted stream name", []string{"--journal-stream=A.B"}, "--journal-stream"},
		{"wildcard stream name", []string{"--journal-stream=*"}, "--journal-stream"},
		{"stream name with space", []string{"--journal-stream=A B"}, "--journal-stream"},
		{"tenant needs openbao", []string{"--openbao-address="}, "--openbao-address is required"},
		{"tenant needs auth", []string{"--openbao-auth-role="}, "--openbao-auth-role"},
		{"tenant needs a store", []string{"--external-secret-store-name="}, "--external-secret-store-name"},
		{"leader election timing", []string{"--leader-elect", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}, ""},
		{"lease not longer than renew", []string{"--leader-elect", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"}, "--leader-elect-lease-duration"},
		{"renew too close to retry", []string{"--leader-elect", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"}, "--leader-elect-retry-period"},
		{"instance only needs no openbao", []string{"--projectors=instance", "--executors=postgresql", "--openbao-address=", "--openbao-auth-role=", "--external-secret-store-name="}, ""},

		// What each database component needs (database.go). The instance
		// projector needs nothing, so it stands in where a case is about
		// executors alone (--projectors cannot be empty).
		{"postgresql executor with openbao needs auth", []string{"--projectors=instance", "--executors=postgresql", "--openbao-auth-role="},
			"--openbao-auth-role (Kubernetes auth) or --openbao-token-file (development) is required by the postgresql executor"},
		{"postgresql executor next to tenant needs openbao", []string{"--projectors=tenant", "--executors=postgresql", "--openbao-address="},
			"--openbao-address is required by the postgresql executor next to the tenant projector"},
		{"postgresql executor next to tenant needs auth", []string{"--projectors=tenant", "--executors=postgresql", "--openbao-auth-role="}, "--openbao-auth-role"},
		{"openbao executor needs openbao", []string{"--projectors=instance", "--executors=openbao", "--openbao-address="}, "--openbao-address is required by the openbao executor"},
		{"openbao executor needs auth", []string{"--projectors=instance", "--executors=openbao", "--openbao-auth-role="}, "--openbao-auth-role"},
		{"openbao executor with a token file", []string{"--projectors=instance", "--executors=openbao", "--openbao-auth-role=", "--openbao-token-file=" + ca}, ""},
		{"openbao executor needs no store", []string{"--projectors=instance", "--executors=openbao", "--external-secret-store-name="}, ""},
		{"externalsecrets executor needs neither openbao nor a store", []string{"--projectors=instance", "--executors=externalsecrets",
			"--openbao-address=", "--openbao-auth-role=", "--external-secret-store-name="}, ""},
		{"tenant projector needs no openbao client", []string{"--projectors=tenant", "--executors=externalsecrets",
			"--openbao-address=", "--openbao-auth-role=", "--openbao-consumer-address=https://bao.example"}, ""},
		{"tenant projector needs a consumer address", []string{"--projectors=tenant", "--executors=externalsecrets", "--openbao-address="},
			"--openbao-consumer-address or --openbao-address is required by the tenant projector"},
		{"tenant projector needs a store", []string{"--projectors=tenant", "--executors=externalsecrets", "--external-secret-store-name="},
			"--external-secret-store-name is required by the tenant projector"},
		{"zero pool size", []string{"--postgresql-max-conns=0"}, "--postgresql-max-conns must be positive"},
		{"negative concurrency", []string{"--executor-concurrency=-1"}, "--executor-concurrency must not be negative"},
		{"backend concurrency", []string{"--executor-backend-concurrency=postgresql=2,kubernetes=64"}, ""},
		{"unknown backend", []string{"--executor-backend-concurrency=mysql=2"}, `unknown executor "mysql"`},
		{"zero backend concurrency", []string{"--executor-backend-concurrency=openbao=0"}, "openbao=0 must be positive"},
		{"malformed backend concurrency", []string{"--executor-backend-concurrency=openbao"}, "is not executor=n"},
		{"backend concurrency with spaces", []string{"--executor-backend-concurrency= kubernetes = 32 , openbao=4,"}, ""},
		{"backend named twice", []string{"--executor-backend-concurrency=openbao=4,openbao=8"}, "executor openbao is named twice"},
		{"pprof on loopback", []string{"--pprof-bind-address=127.0.0.1:6060"}, ""},
		{"pprof on IPv6 loopback", []string{"--pprof-bind-address=[::1]:6060"}, ""},
		{"pprof on a host name", []string{"--pprof-bind-address=localhost:6060"}, "not a loopback IP address"},
		{"pprof on every interface", []string{"--pprof-bind-address=:6060"}, "not a loopback IP address"},
		{"pprof on a routable address", []string{"--pprof-bind-address=10.0.0.7:6060"}, "not a loopback IP address"},
		{"pprof without a port", []string{"--pprof-bind-address=127.0.0.1"}, "not host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, append(append([]string{}, ok...), tc.args...)...)
			if tc.want == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// A domain's flags are validated only when one of its components is
// enabled: with another domain's components alone, no database flag is
// required or even checked, and the other way round.
func TestDomainFlagsOnlyWhenEnabled(t *testing.T) {
	other := func() *domain {
		var required string
		return &domain{name: "other", projectors: []string{"otherprojector"}, executors: []string{"otherexecutor"},
			bind: func(fs *flag.FlagSet) { fs.StringVar(&required, "other-required", "", "") },
			validate: func(selection) []error {
				if required == "" {
					return []error{errors.New("--other-required is required")}
				}
				return nil
			}}
	}
	shared := []string{"--namespace=ayatori-system", "--nats-url=nats://127.0.0.1:4222", "--nats-nkey=/run/nats/manager.nk",
		"--journal-signing-key=/run/keys/signing.pem", "--journal-trusted-keys=/run/keys/trusted"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no database component, no database flag", []string{"--projectors=otherprojector", "--executors=otherexecutor", "--other-required=x"}, ""},
		{"no database component, database flags not checked", []string{"--projectors=otherprojector", "--executors=otherexecutor", "--other-required=x",
			"--openbao-kv-mount=/kv", "--openbao-address=bao:8200", "--postgresql-max-conns=0", "--postgresql-ca-bundle-path=/nonexistent/ca.pem",
			"--instance-resync-interval=0s"}, ""},
		{"the other domain's flags checked when it is enabled", []string{"--projectors=otherprojector", "--executors=otherexecutor"}, "--other-required"},
		{"one database executor enables the database checks", []string{"--projectors=otherprojector", "--executors=otherexecutor,openbao", "--other-required=x"},
			"--openbao-address is required"},
		{"database components alone need no other flag", []string{"--projectors=instance", "--executors=postgresql"}, ""},
		{"by default every domain runs", nil, "--other-required"},
		{"unknown names list every domain's", []string{"--projectors=bogus"}, "(known: instance, tenant, otherprojector)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := options{domains: []*domain{newDatabaseDomain(), other()}}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			o.bind(fs)
			if err := fs.Parse(append(append([]string{}, shared...), tc.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.validate()
			if tc.want == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// Every domain has its own journal domain and component names: a name
// selects exactly one component.
func TestDomainsOwnDistinctNames(t *testing.T) {
	domains, components := map[string]bool{}, map[string]string{}
	for _, d := range newDomains() {
		if d.name == "" || domains[d.name] {
			t.Errorf("domain name %q empty or used twice", d.name)
		}
		domains[d.name] = true
		if d.bind == nil || d.validate == nil || d.addToScheme == nil || d.setup == nil {
			t.Errorf("domain %s: bind, validate, addToScheme and setup are required", d.name)
		}
		for _, c := range append(append([]string{}, d.projectors...), d.executors...) {
			if owner, ok := components[c]; ok {
				t.Errorf("component %q of domain %s is also one of domain %s", c, d.name, owner)
			}
			components[c] = d.name
		}
	}
}

// TestRunRejectsBadFlagsBeforeStarting: run() fails before touching any
// server when a flag is invalid.
func TestRunRejectsBadFlagsBeforeStarting(t *testing.T) {
	err := run([]string{"--namespace=x", "--reconcile-timeout=-5s", "--nats-url=nats://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "invalid flags") {
		t.Fatalf("want invalid flags, got %v", err)
	}
}

// Every flag is in a deployment guide's table: the shared and database
// flags in docs/database/deployment.md, the execution domain's in
// docs/execution/operations.md.
func TestEveryFlagDocumented(t *testing.T) {
	var doc []byte
	for _, f := range []string{"../../docs/database/deployment.md", "../../docs/execution/operations.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc = append(doc, b...)
	}
	var o options
	fs := flag.NewFlagSet("doc", flag.ContinueOnError)
	o.bind(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(doc), "`--"+f.Name+"`") {
			t.Errorf("flag --%s is not documented in docs/database/deployment.md or docs/execution/operations.md", f.Name)
		}
	})
}

// A rejected URL may carry a password or token: the message must not.
func TestFlagErrorsRedactSecrets(t *testing.T) {
	err := parse(t, "--namespace=x", "--openbao-auth-role=r", "--external-secret-store-name=s",
		"--openbao-address=https://root:CANARY-pw@bao/?token=CANARY-tok", "--nats-url=http://u:CANARY-nats@h:4222")
	if err == nil {
		t.Fatal("bad URLs accepted")
	}
	if strings.Contains(err.Error(), "CANARY") {
		t.Fatalf("secret echoed in: %v", err)
	}
}
