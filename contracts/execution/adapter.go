package execution

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Adapter is one execution backend, registered once: which classes it
// serves, what its parameters are, what it admits, when it is ready (the
// Job and JobClass projectors' view) and how its executor is built (the
// domain dispatcher's view). Each backend package builds its own value
// (executors/kubernetes.Adapter, executors/opensandbox.Adapter); the
// manager lists the values it runs in one place (cmd/ayatori-manager
// execution.go, executionBackends). The projectors know no backend by
// name: everything backend-specific they do goes through these fields.
type Adapter struct {
	// Name is the adapter's name in intents (EnsureIntent.Adapter) and in
	// status.execution.adapter, e.g. AdapterKubernetes. Required, unique.
	Name string
	// ControllerName is the JobClass spec.controllerName whose classes
	// this adapter runs. Required, unique.
	ControllerName string
	// ParametersGroup is the API group of the parameters kind ("": the
	// execution API group, execution.ayatori.ddupan.top, where the
	// shipped adapters' kinds live).
	ParametersGroup string
	// ParametersKind is the kind (cluster-scoped, in ParametersGroup) of
	// the parameters objects a class of this adapter references.
	// Required, unique among the adapters whatever the group (it names the
	// parameters protection controller).
	ParametersKind string
	// NewParameters returns an empty object of ParametersKind (the
	// projectors read and watch parameters through it; an
	// *unstructured.Unstructured with its GroupVersionKind set serves a
	// kind without Go types). Required.
	NewParameters func() client.Object
	// Admit checks a Job against its class's parameters and its effective
	// resources before the Job is accepted. It returns "", "" to admit,
	// else a reason (an executionv1alpha1 Reason*) and a message safe for
	// a Condition that names objects and fields, never a value. It reads
	// nothing and runs before any Secret or ConfigMap the Job references
	// is read. nil admits every Job.
	Admit func(job *executionv1alpha1.Job, params client.Object, resources executionv1alpha1.ExecutionResourceRequirements) (reason, message string)
	// Ready decides the class's Ready condition from the management
	// cluster's own objects (read through c, the manager's cache) once the
	// class is Accepted: "", "" when ready, else a reason and a message.
	// An error is a failed read (the class is reconciled again), never a
	// verdict. nil: ready.
	Ready func(ctx context.Context, c client.Reader, params client.Object) (reason, message string, err error)
	// Watches are the kinds Ready reads: a change of any object of them
	// re-evaluates every JobClass (an *unstructured.Unstructured with its
	// GroupVersionKind set for a kind without Go types). Empty when Ready
	// is nil.
	Watches []client.Object
	// Probe checks the backend itself once Ready passed (endpoint, API
	// key); the JobClass projector calls it again every probe interval,
	// because nothing watches a backend. It must bound its own duration
	// and return the same message for the same state. nil: no probe.
	Probe func(ctx context.Context, params client.Object) (ready bool, reason, message string)
	// NewHandlers builds the adapter's executor and returns its journal
	// handlers by operation (one per entry of Operations), registered
	// under Name on the domain's dispatcher (Register). It is called
	// once, and only in a process that runs this adapter's executor (a
	// replica that runs only projectors never builds it); an error stops
	// the process's start-up. Required.
	NewHandlers func() (map[string]journal.Handler, error)
	// Changes watches the backend for changes of executions, so that the
	// Job projector observes an execution soon after it changes instead of
	// on its back-off alone. It is called once, only in a process that runs
	// the Job projector, and returns a source for that projector's
	// controller: for every change of an execution it sees, the source
	// calls changed with the execution's reference (an ID the backend
	// assigned, as in Observation.References) and its new revision
	// (Observation.Revision; "" when the execution is gone), and enqueues
	// the requests changed returns. A change is a hint, never a verdict:
	// the projector answers it with an Observe, and the Observation
	// decides. changed ignores references no outcome reported, so an
	// object someone else created in the backend wakes nothing. nil: the
	// projector observes on its back-off alone.
	Changes func(changed func(ref Reference, revision string) []reconcile.Request) (source.Source, error)
}

// ParametersGroupName is ParametersGroup or its default, the execution
// API group.
func (a Adapter) ParametersGroupName() string {
	if a.ParametersGroup != "" {
		return a.ParametersGroup
	}
	return executionv1alpha1.GroupVersion.Group
}

// Adapters are the adapters one manager runs.
type Adapters []Adapter

// Validate reports, joined, every adapter without a name, controller
// name, parameters kind, NewParameters or NewHandlers, with Watches but no
// Ready, and two adapters sharing a name, a controller name or a
// parameters kind.
func (as Adapters) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, a := range as {
		if a.Name == "" || a.ControllerName == "" || a.ParametersKind == "" || a.NewParameters == nil || a.NewHandlers == nil {
			errs = append(errs, fmt.Errorf("execution adapter %d (%q): Name, ControllerName, ParametersKind, NewParameters and NewHandlers are required", i, a.Name))
			continue
		}
		if len(a.Watches) > 0 && a.Ready == nil {
			errs = append(errs, fmt.Errorf("execution adapter %s: Watches without Ready", a.Name))
		}
		for _, k := range []string{"name " + a.Name, "controller " + a.ControllerName, "kind " + a.ParametersKind} {
			if seen[k] {
				errs = append(errs, fmt.Errorf("execution adapters: two adapters have %s", k))
			}
			seen[k] = true
		}
	}
	if len(as) == 0 {
		errs = append(errs, errors.New("execution adapters: none registered"))
	}
	return errors.Join(errs...)
}

// ForController returns the adapter serving controllerName.
func (as Adapters) ForController(controllerName string) (Adapter, bool) {
	for _, a := range as {
		if a.ControllerName == controllerName {
			return a, true
		}
	}
	return Adapter{}, false
}

// ForKind returns the adapter whose parameters are of kind in group.
func (as Adapters) ForKind(group, kind string) (Adapter, bool) {
	for _, a := range as {
		if a.ParametersKind == kind && a.ParametersGroupName() == group {
			return a, true
		}
	}
	return Adapter{}, false
}

// ControllerNames are the controller names of as, in order.
func (as Adapters) ControllerNames() []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.ControllerName)
	}
	return out
}

// Names are the adapter names of as, in order.
func (as Adapters) Names() []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.Name)
	}
	return out
}

// Register builds the executor of every adapter for which runs(Name)
// holds (nil: every adapter) and registers its handlers under its name on
// d (a dispatcher of NewDispatcher, which routes each intent to the adapter
// its payload names). The handlers must be exactly one per operation of
// Operations, built with a journal.Backend named Name (so that the
// Observation names the adapter that executed it). It returns Validate's
// error, else the first error of a NewHandlers or of the registration;
// the caller stops on an error (adapters before the failing one stay
// registered).
func (as Adapters) Register(d *journal.Dispatcher, runs func(adapter string) bool) error {
	if err := as.Validate(); err != nil {
		return err
	}
	for _, a := range as {
		if runs != nil && !runs(a.Name) {
			continue
		}
		hs, err := a.NewHandlers()
		if err != nil {
			return fmt.Errorf("execution adapter %s: %w", a.Name, err)
		}
		for _, op := range Operations {
			if hs[op] == nil {
				return fmt.Errorf("execution adapter %s: no handler for operation %s", a.Name, op)
			}
		}
		if len(hs) != len(Operations) {
			return fmt.Errorf("execution adapter %s: %d handlers, want one per operation of the domain (%d)", a.Name, len(hs), len(Operations))
		}
		if err := d.HandleAll(a.Name, hs); err != nil {
			return fmt.Errorf("execution adapter %s: %w", a.Name, err)
		}
	}
	return nil
}
