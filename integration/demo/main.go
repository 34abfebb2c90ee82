// Command demo is what `make demo` runs: it starts real servers through the
// integration harness and runs the product on them, printing what a user
// would see. Until the database controllers land it exercises the journal
// spine: an embedded JetStream server (file storage, sync_interval always),
// intents appended before their (simulated) execution by a real consumer,
// then the forensics CLI over the live stream.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("demo OK")
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	step("starting embedded NATS JetStream (file storage, sync_interval always)")
	n, err := integration.NewNATS(integration.NATSOptions{})
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Println("    ", n.URL)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	manager, err := journal.Open(ctx, nc, journal.Config{Actor: "demo-manager"})
	if err != nil {
		return err
	}
	executor, err := journal.Open(ctx, nc, journal.Config{Actor: "demo-executor"})
	if err != nil {
		return err
	}

	step("starting an executor consuming intents (durable pull consumer, explicit ack)")
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	calls := 0
	handler := func(_ context.Context, r journal.Record) (journal.Outcome, error) {
		calls++
		if r.Operation == "CreateRole" && r.Attempt == 1 {
			return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: "DependencyUnavailable", Message: "PostgreSQL not reachable (demo)"}}, nil
		}
		var payload any
		if r.Operation == journal.OperationWriteCredential {
			payload = journal.CredentialWriteOutcome{Created: true}
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: payload}, nil
	}
	handlers := map[string]journal.Handler{}
	for _, op := range []string{"ObserveInstance", "BootstrapRegistry", "ClaimOwnership", "WriteCredential", "CreateRole", "CreateDatabase"} {
		handlers[op] = handler
	}
	go func() {
		_ = executor.Consume(cctx, journal.ConsumerConfig{Durable: "demo-executor", AckWait: 5 * time.Second}, handlers)
	}()

	tenant := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "netbox", Name: "netbox",
		UID: "0d5f6a2e-demo-4c1b-9f00-000000000001", Generation: 1}
	ops := []struct {
		op      string
		attempt int
	}{{"ClaimOwnership", 1}, {"WriteCredential", 1}, {"CreateRole", 1}, {"CreateRole", 2}, {"CreateDatabase", 1}}
	step("projector appends each intent (acked by the server) and waits for its outcome")
	for _, o := range ops {
		in, err := journal.NewIntent(tenant, o.op, "", o.attempt, nil)
		if err != nil {
			return err
		}
		recs, err := manager.Read(ctx, tenant.UID)
		if err != nil {
			return err
		}
		res, err := manager.Append(ctx, &in, journal.ExpectLastSequence(journal.Fold(recs).LastSequence))
		if err != nil {
			return err
		}
		fmt.Printf("     intent %-16s attempt %d  acked at seq %d\n", o.op, o.attempt, res.Sequence)
		if err := waitOutcome(ctx, manager, tenant.UID, in.ID); err != nil {
			return err
		}
	}
	stop()

	bin := filepath.Join(os.TempDir(), fmt.Sprintf("ayatori-journal-demo-%d", os.Getpid()))
	defer os.Remove(bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ayatori-journal")
	build.Dir = integration.RepoRoot()
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build ayatori-journal: %w", err)
	}
	for _, args := range [][]string{
		{"timeline", "--kind", "PostgreSQLTenant", "-n", "netbox", "--name", "netbox"},
		{"list"},
		{"verify"},
	} {
		step("ayatori-journal %v", args)
		cmd := exec.CommandContext(ctx, bin, append([]string{"--server", n.URL}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("ayatori-journal %v: %w", args, err)
		}
	}
	if calls != len(ops) {
		return fmt.Errorf("executor ran %d intents, want %d (exactly once each)", calls, len(ops))
	}
	return nil
}

func waitOutcome(ctx context.Context, s *journal.Store, uid, intentID string) error {
	for {
		recs, err := s.Read(ctx, uid)
		if err != nil {
			return err
		}
		if o, ok := journal.Fold(recs).OutcomeOf(intentID); ok {
			fmt.Printf("     outcome %-15s %s\n", o.Operation, o.Result)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no outcome for %s: %w", intentID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
