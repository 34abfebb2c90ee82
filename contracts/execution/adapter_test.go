package execution_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// testAdapter is a complete adapter whose executor records that it was
// built and answers every operation with its name.
func testAdapter(name, group, kind string, built *[]string) execution.Adapter {
	return execution.Adapter{
		Name: name, ControllerName: "example.com/" + name, ParametersGroup: group, ParametersKind: kind,
		NewParameters: func() client.Object { return &unstructured.Unstructured{} },
		NewHandlers: func() (map[string]journal.Handler, error) {
			*built = append(*built, name)
			hs := map[string]journal.Handler{}
			for _, op := range execution.Operations {
				hs[op] = func(context.Context, journal.Record) (journal.Outcome, error) { return journal.Outcome{}, nil }
			}
			return hs, nil
		},
	}
}

func TestAdaptersValidate(t *testing.T) {
	var built []string
	a := testAdapter("a", "", "AParameters", &built)
	for name, c := range map[string]struct {
		as   execution.Adapters
		want string
	}{
		"none":                  {nil, "none registered"},
		"one":                   {execution.Adapters{a}, ""},
		"same kind, two groups": {execution.Adapters{a, testAdapter("b", "example.com", "AParameters", &built)}, "two adapters have kind AParameters"},
		"Watches without Ready": {execution.Adapters{func() execution.Adapter {
			b := a
			b.Watches = []client.Object{&unstructured.Unstructured{}}
			return b
		}()}, "Watches without Ready"},
		"duplicate name": {execution.Adapters{a, func() execution.Adapter {
			b := testAdapter("b", "", "BParameters", &built)
			b.Name = "a"
			return b
		}()}, "two adapters have name a"},
		"duplicate kind": {execution.Adapters{a, testAdapter("b", "", "AParameters", &built)}, "two adapters have kind AParameters"},
		"no NewHandlers": {execution.Adapters{func() execution.Adapter { b := a; b.NewHandlers = nil; return b }()}, "NewHandlers are required"},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.as.Validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate: %v, want %q", err, c.want)
			}
		})
	}
}

func TestAdaptersLookUp(t *testing.T) {
	var built []string
	as := execution.Adapters{testAdapter("a", "", "AParameters", &built), testAdapter("b", "example.com", "BParameters", &built)}
	if err := as.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, ok := as.ForController("example.com/b"); !ok || a.Name != "b" {
		t.Fatalf("ForController(b) = %q, %v", a.Name, ok)
	}
	if _, ok := as.ForController("example.com/c"); ok {
		t.Fatal("ForController found an unregistered controller")
	}
	if a, ok := as.ForKind(executionv1alpha1.GroupVersion.Group, "AParameters"); !ok || a.Name != "a" {
		t.Fatalf("ForKind(execution group, AParameters) = %q, %v", a.Name, ok)
	}
	if _, ok := as.ForKind("example.com", "AParameters"); ok {
		t.Fatal("ForKind matched a kind in another group")
	}
	if _, ok := as.ForKind(executionv1alpha1.GroupVersion.Group, "BParameters"); ok {
		t.Fatal("ForKind matched BParameters in the execution group")
	}
	if a, ok := as.ForKind("example.com", "BParameters"); !ok || a.Name != "b" {
		t.Fatalf("ForKind(example.com, BParameters) = %q, %v", a.Name, ok)
	}
}

// Register builds only the executors this process runs, and every
// operation of the domain needs a handler.
func TestAdaptersRegister(t *testing.T) {
	var built []string
	as := execution.Adapters{testAdapter("a", "", "AParameters", &built), testAdapter("b", "", "BParameters", &built)}
	d, err := execution.NewDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := as.Register(d, func(name string) bool { return name == "b" }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(built, ",") != "b" {
		t.Fatalf("built executors %v, want only b", built)
	}

	partial := testAdapter("c", "", "CParameters", &built)
	full := partial.NewHandlers
	partial.NewHandlers = func() (map[string]journal.Handler, error) {
		hs, _ := full()
		delete(hs, execution.OpDelete)
		return hs, nil
	}
	d, _ = execution.NewDispatcher()
	if err := (execution.Adapters{partial}).Register(d, func(string) bool { return true }); err == nil || !strings.Contains(err.Error(), "no handler for operation Delete") {
		t.Fatalf("an adapter without a Delete handler registered: %v", err)
	}

	extra := testAdapter("e", "", "EParameters", &built)
	extra.NewHandlers = func() (map[string]journal.Handler, error) {
		hs, _ := full()
		hs["Restart"] = hs[execution.OpObserve]
		return hs, nil
	}
	d, _ = execution.NewDispatcher()
	if err := (execution.Adapters{extra}).Register(d, nil); err == nil || !strings.Contains(err.Error(), "one per operation") {
		t.Fatalf("an adapter with a handler for an unknown operation registered: %v", err)
	}

	failing := testAdapter("d", "", "DParameters", &built)
	failing.NewHandlers = func() (map[string]journal.Handler, error) { return nil, errors.New("no workload cluster") }
	d, _ = execution.NewDispatcher()
	if err := (execution.Adapters{failing}).Register(d, func(string) bool { return true }); err == nil || !strings.Contains(err.Error(), "execution adapter d: no workload cluster") {
		t.Fatalf("a failing executor registered: %v", err)
	}
}
