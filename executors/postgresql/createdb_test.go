package postgresql_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestCreateDatabaseOneAtATime: CreateDatabase intents of several Tenants
// of one Instance, delivered at once, run their CREATE DATABASE one after
// the other (concurrent ones cost the server more CPU each), while the
// pool (4 connections here) stays free for every other statement.
func TestCreateDatabaseOneAtATime(t *testing.T) {
	f := newFixture(t)
	const n = 6
	var recs []journal.Record
	for i := range n {
		uid, name := fmt.Sprintf("c-%d", i), fmt.Sprintf("conc%d", i)
		f.pws[uid] = "CANARY-exec-conc-" + uid
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole} {
			out, _ := f.tenant(t, uid, name, op)
			must(t, op+" "+name, out)
		}
		obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: name, UID: uid, Generation: 1}
		in := dbcontract.TenantIntent{Endpoint: f.ep, InstanceUID: "inst-1", Database: name, Role: name, CredentialMount: "kv",
			CredentialPath: "tenants/ns/" + name, AdminCredRef: dbcontract.AdminCredentialRef{SecretName: "admin", UsernameKey: "username", PasswordKey: "password"}}
		rec, err := journal.NewIntent(obj, dbcontract.OpCreateDatabase, "", 1, in)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}

	// Watch the server's active CREATE DATABASE statements while the
	// handlers run.
	ctx, cancel := context.WithCancel(context.Background())
	watcher, err := pgx.Connect(ctx, f.pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	peak, samples := 0, 0
	watched := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			var active int
			err := watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'CREATE DATABASE %'").Scan(&active)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				watched <- err
				return
			}
			peak, samples = max(peak, active), samples+1
		}
		watched <- nil
	}()

	h := f.ex.TenantHandlers()[dbcontract.OpCreateDatabase]
	outs := make([]journal.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range recs {
		wg.Go(func() { outs[i], errs[i] = h(context.Background(), recs[i]) })
	}
	wg.Wait()
	cancel()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if errs[i] != nil {
			t.Fatalf("CreateDatabase conc%d: transient error %v", i, errs[i])
		}
		must(t, fmt.Sprintf("CreateDatabase conc%d", i), outs[i])
	}
	if samples < n {
		t.Fatalf("only %d samples of pg_stat_activity: nothing proven", samples)
	}
	if peak > 1 {
		t.Fatalf("%d CREATE DATABASE statements ran at once on one Instance, want 1 at a time", peak)
	}
	if peak == 0 {
		t.Fatalf("no CREATE DATABASE seen active in %d samples: nothing proven", samples)
	}
}

// TestCreateDatabaseSlot: one slot per Instance; a waiter gives up with
// its context's error and holds nothing; releasing twice frees once.
func TestCreateDatabaseSlot(t *testing.T) {
	p := pgexec.NewPools(nil, 4, time.Second)
	ctx := context.Background()
	release, err := p.CreateDatabaseSlot(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.CreateDatabaseSlot(ctx, "b")
	if err != nil {
		t.Fatalf("another Instance waited: %v", err)
	}
	other()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.CreateDatabaseSlot(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second slot of one Instance: %v, want the deadline", err)
	}
	release()
	release() // a second call frees nothing more
	again, err := p.CreateDatabaseSlot(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := p.CreateDatabaseSlot(short2, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a double release freed two slots: %v", err)
	}
	again()
}
