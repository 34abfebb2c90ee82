package execution_test

import (
	"context"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Both adapters execute every operation of the domain: each intent goes
// to the adapter its payload names (an intent without one, from a
// projector that knew only Kubernetes, to Kubernetes), never to the other.
func TestDispatcherRoutesByThePayloadsAdapter(t *testing.T) {
	d, err := execution.NewDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	handlers := func(adapter string) map[string]journal.Handler {
		out := map[string]journal.Handler{}
		for _, op := range execution.Operations {
			out[op] = func(context.Context, journal.Record) (journal.Outcome, error) {
				got = adapter
				return journal.Outcome{}, nil
			}
		}
		return out
	}
	for _, a := range []string{execution.AdapterKubernetes, execution.AdapterOpenSandbox} {
		if err := d.HandleAll(a, handlers(a)); err != nil {
			t.Fatalf("register %s: %v", a, err)
		}
	}
	obj := journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ns", Name: "j", UID: "7e1c0b52-1111-4222-8333-000000000001", Generation: 1}
	for _, tc := range []struct {
		op      string
		payload any
		want    string
	}{
		{execution.OpEnsure, execution.EnsureIntent{Adapter: execution.AdapterOpenSandbox, TaskDigest: "sha256:x"}, execution.AdapterOpenSandbox},
		{execution.OpEnsure, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, TaskDigest: "sha256:x"}, execution.AdapterKubernetes},
		{execution.OpObserve, execution.ExecutionIntent{Adapter: execution.AdapterOpenSandbox}, execution.AdapterOpenSandbox},
		{execution.OpCancel, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: execution.StopCancelled}, execution.AdapterKubernetes},
		{execution.OpDelete, execution.ExecutionIntent{Adapter: execution.AdapterOpenSandbox}, execution.AdapterOpenSandbox},
		{execution.OpObserve, execution.ExecutionIntent{}, execution.AdapterKubernetes},
	} {
		rec, err := journal.NewIntent(obj, tc.op, "", 1, tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		h, err := d.HandlerFor(rec)
		if err != nil {
			t.Fatalf("%s %+v: %v", tc.op, tc.payload, err)
		}
		got = ""
		_, _ = h(context.Background(), rec)
		if got != tc.want {
			t.Errorf("%s %+v went to %q, want %q", tc.op, tc.payload, got, tc.want)
		}
	}
	// An adapter this process does not run: no handler (a Failed/
	// UnknownOperation outcome), never the other adapter.
	only, _ := execution.NewDispatcher()
	if err := only.HandleAll(execution.AdapterKubernetes, handlers(execution.AdapterKubernetes)); err != nil {
		t.Fatal(err)
	}
	rec, _ := journal.NewIntent(obj, execution.OpObserve, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterOpenSandbox})
	if _, err := only.HandlerFor(rec); err == nil {
		t.Fatal("an OpenSandbox intent was routed to the Kubernetes adapter")
	}
}
