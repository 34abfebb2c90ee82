package execution_test

import (
	"context"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func TestAdapterOf(t *testing.T) {
	ensure, err := journal.NewIntent(fRef(), execution.OpEnsure, "", 1, execution.EnsureIntent{Adapter: execution.AdapterOpenSandbox, Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	del, err := journal.NewIntent(fRef(), execution.OpDelete, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rec  journal.Record
		want string
	}{{ensure, execution.AdapterOpenSandbox}, {del, execution.AdapterKubernetes}, {journal.Record{}, ""}, {journal.Record{Payload: []byte("[1]")}, ""}} {
		if got := execution.AdapterOf(c.rec); got != c.want {
			t.Errorf("AdapterOf(%s) = %q, want %q", c.rec.Payload, got, c.want)
		}
	}
}

// Both adapters register every operation in one process only behind the
// domain's Route (without it the second registration is refused).
func TestRouteLetsBothAdaptersRegister(t *testing.T) {
	handlers := func() map[string]journal.Handler {
		h := map[string]journal.Handler{}
		for _, op := range execution.Operations {
			h[op] = func(context.Context, journal.Record) (journal.Outcome, error) { return journal.Outcome{}, nil }
		}
		return h
	}
	d, err := journal.NewDispatcher(execution.Domain)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.HandleAll(execution.AdapterKubernetes, handlers()); err != nil {
		t.Fatal(err)
	}
	if err := d.HandleAll(execution.AdapterOpenSandbox, handlers()); err == nil {
		t.Fatal("two adapters registered without a Route")
	}
	d, _ = journal.NewDispatcher(execution.Domain)
	if err := execution.Route(d); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{execution.AdapterKubernetes, execution.AdapterOpenSandbox} {
		if err := d.HandleAll(a, handlers()); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
}
