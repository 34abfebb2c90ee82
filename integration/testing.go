package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

var printProviderOnce sync.Once

// Servers skips t in -short mode (the unit-test loop) and otherwise prints,
// once per test binary, which provider the harness chose.
func Servers(t testing.TB) Provider {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real servers; skipped in -short mode (make test-unit)")
	}
	p, reason, err := SelectProvider()
	if err != nil {
		t.Fatal(err)
	}
	printProviderOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "integration: provider %s (%s)\n", p, reason)
	})
	return p
}

// StartControlPlane starts kube-apiserver + etcd for t and stops it on cleanup.
func StartControlPlane(t testing.TB, opts ControlPlaneOptions) *ControlPlane {
	t.Helper()
	Servers(t)
	cp, err := NewControlPlane(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	return cp
}

// StartNATS starts an embedded JetStream server for t.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	Servers(t)
	n, err := NewNATS(NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// StartNATSCluster starts a three-node JetStream cluster (nats-server
// processes, see NewNATSCluster) for t.
func StartNATSCluster(t testing.TB, opts NATSClusterOptions) *NATSCluster {
	t.Helper()
	Servers(t)
	if opts.Log == nil {
		opts.Log = t.Logf
	}
	c, err := NewNATSCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartPostgres starts a TLS-only PostgreSQL cluster for t.
func StartPostgres(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	Servers(t)
	pg, err := NewPostgres(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	return pg
}

// StartOpenBao starts an OpenBao-compatible server with KV v2 at "kv" for t.
func StartOpenBao(t testing.TB) *OpenBao {
	t.Helper()
	Servers(t)
	ob, err := NewOpenBao(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ob.Close)
	return ob
}

// StartExternalSecrets starts the ESO controller against cp (started with
// ExternalSecretsCRDs) with a Ready ClusterSecretStore at ob.
func StartExternalSecrets(t testing.TB, cp *ControlPlane, ob *OpenBao, opts ExternalSecretsOptions) *ExternalSecrets {
	t.Helper()
	Servers(t)
	e, err := NewExternalSecrets(context.Background(), cp, ob, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// StartWorkload starts a control plane and a Workload on it (controller
// manager, scheduler, kwok fake nodes) for t, stopping both on cleanup and
// printing the processes' log tails when t failed.
func StartWorkload(t testing.TB, opts WorkloadOptions) *Workload {
	t.Helper()
	cp := StartControlPlane(t, ControlPlaneOptions{})
	w, err := NewWorkload(cp, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(w.LogTails(40))
		}
		w.Close()
	})
	return w
}

// JournalSigner returns the test process's journal signing key (the one
// every stack's manager signs with, JournalSigningKey), for stores a test
// opens itself.
func JournalSigner(t testing.TB) *journal.SigningKey {
	t.Helper()
	k, err := JournalSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// JournalTrust trusts the test process's journal signing key.
func JournalTrust(t testing.TB) *journal.TrustedKeys {
	return journal.NewTrustedKeys(JournalSigner(t).Public())
}

// OpenJournal connects to n as the manager identity (reconnecting every
// 100 ms while n is down) and opens the journal with the test process's
// signing key, acting as actor. The connection closes when t ends.
func OpenJournal(t testing.TB, n *NATS, actor string) *journal.Store {
	t.Helper()
	nc, err := n.Connect(journal.IdentityManager, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := journal.Open(context.Background(), nc, journal.Config{Actor: actor, Signer: JournalSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
