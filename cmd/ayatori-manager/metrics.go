package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// The operator's metrics beyond the journal's histograms (docs/operations.md
// "Metrics"): the journal probe, objects by condition, and leadership.

// databaseReasons are the Ready reasons of both database kinds.
var databaseReasons = []string{
	databasev1alpha1.ReasonReconciling, databasev1alpha1.ReasonReady, databasev1alpha1.ReasonInvalidSpec,
	databasev1alpha1.ReasonImmutableField, databasev1alpha1.ReasonDependencyUnavailable, databasev1alpha1.ReasonAuthenticationFailed,
	databasev1alpha1.ReasonInsufficientPrivileges, databasev1alpha1.ReasonInstanceNotReady, databasev1alpha1.ReasonConflict,
	databasev1alpha1.ReasonProvisioningFailed, databasev1alpha1.ReasonCredentialProjectionFailed, databasev1alpha1.ReasonLoginRejected,
	databasev1alpha1.ReasonDeletionBlocked, databasev1alpha1.ReasonNamespaceNotAllowed,
}

// jobReasons are the Succeeded reasons of a Job (and the Accepted ones it
// carries over while it is refused).
var jobReasons = []string{
	executionv1alpha1.ReasonPending, executionv1alpha1.ReasonScheduling, executionv1alpha1.ReasonStarting,
	executionv1alpha1.ReasonRunning, executionv1alpha1.ReasonCancelling, executionv1alpha1.ReasonResultUnknown,
	executionv1alpha1.ReasonCompleted, executionv1alpha1.ReasonProcessFailed, executionv1alpha1.ReasonDeadlineExceeded,
	executionv1alpha1.ReasonCancelled, executionv1alpha1.ReasonBackendLost, executionv1alpha1.ReasonImagePullFailed,
	executionv1alpha1.ReasonOOMKilled, executionv1alpha1.ReasonEvicted, executionv1alpha1.ReasonBackendFailed,
	executionv1alpha1.ReasonNoDefaultJobClass, executionv1alpha1.ReasonAmbiguousDefaultJobClass, executionv1alpha1.ReasonJobClassNotFound,
	executionv1alpha1.ReasonJobClassNotAccepted, executionv1alpha1.ReasonNamespaceNotAllowed, executionv1alpha1.ReasonInvalidResources,
	executionv1alpha1.ReasonEnvReferenceNotFound, executionv1alpha1.ReasonInvalidEnvReference, executionv1alpha1.ReasonSecretEnvNotAllowed,
	executionv1alpha1.ReasonImageAuthNotAllowed, executionv1alpha1.ReasonCommandRequired, executionv1alpha1.ReasonRequestMappingUnsupported,
	executionv1alpha1.ReasonClassNotReady, executionv1alpha1.ReasonServiceAccountNotFound, executionv1alpha1.ReasonParametersChanged,
	executionv1alpha1.ReasonBackendUnavailable,
}

// jobClassReasons are the Ready reasons of a JobClass.
var jobClassReasons = []string{
	executionv1alpha1.ReasonBackendReachable, executionv1alpha1.ReasonBackendUnavailable, executionv1alpha1.ReasonRuntimeClassNotFound,
	executionv1alpha1.ReasonAPIKeySecretNotFound, executionv1alpha1.ReasonAPIKeyRejected, executionv1alpha1.ReasonJobClassDeleting,
	executionv1alpha1.ReasonUnsupportedController, executionv1alpha1.ReasonInvalidParametersReference,
	executionv1alpha1.ReasonParametersNotFound, executionv1alpha1.ReasonInvalidResourcePolicy, executionv1alpha1.ReasonClassNotReady,
	"Pending",
}

// conditionKinds are the kinds whose projector this replica runs.
func conditionKinds(on selection) []journaled.ConditionKind {
	var out []journaled.ConditionKind
	if on.projector(instanceProjector) {
		out = append(out, journaled.ConditionKind{Domain: "database", Kind: "PostgreSQLInstance", Condition: databasev1alpha1.ConditionReady,
			NewList: func() client.ObjectList { return &databasev1alpha1.PostgreSQLInstanceList{} },
			Conditions: func(o client.Object) []metav1.Condition {
				return o.(*databasev1alpha1.PostgreSQLInstance).Status.Conditions
			}, Reasons: databaseReasons})
	}
	if on.projector(tenantProjector) {
		out = append(out, journaled.ConditionKind{Domain: "database", Kind: "PostgreSQLTenant", Condition: databasev1alpha1.ConditionReady,
			NewList: func() client.ObjectList { return &databasev1alpha1.PostgreSQLTenantList{} },
			Conditions: func(o client.Object) []metav1.Condition {
				return o.(*databasev1alpha1.PostgreSQLTenant).Status.Conditions
			}, Reasons: databaseReasons})
	}
	if on.projector(jobProjector) {
		out = append(out, journaled.ConditionKind{Domain: "execution", Kind: "Job", Condition: executionv1alpha1.JobConditionSucceeded,
			NewList: func() client.ObjectList { return &executionv1alpha1.JobList{} },
			Conditions: func(o client.Object) []metav1.Condition {
				return o.(*executionv1alpha1.Job).Status.Conditions
			}, Reasons: jobReasons})
	}
	if on.projector(jobClassProjector) {
		out = append(out, journaled.ConditionKind{Domain: "execution", Kind: "JobClass", Condition: executionv1alpha1.JobClassConditionReady,
			NewList: func() client.ObjectList { return &executionv1alpha1.JobClassList{} },
			Conditions: func(o client.Object) []metav1.Condition {
				return o.(*executionv1alpha1.JobClass).Status.Conditions
			}, Reasons: jobClassReasons})
	}
	return out
}

// leading is true while this replica leads (the leader gauge's value).
var leading atomic.Bool

var leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "ayatori_manager_leader",
	Help: "1 while this replica holds the leader lease and runs the projectors (also 1 without leader election), else 0.",
})

// registerMetrics registers the manager's collectors with reg and a
// runnable that sets ayatori_manager_leader once this replica leads.
func registerMetrics(reg prometheus.Registerer, mgr manager.Manager, store *journal.Store, on selection, durables []string) error {
	collectors := []prometheus.Collector{leaderGauge, &journal.StreamCollector{Store: store, Consumers: durables}}
	if kinds := conditionKinds(on); len(kinds) > 0 {
		// Only the leader lists: its cache holds these kinds for its
		// projectors; a standby's would start informers just for metrics.
		collectors = append(collectors, &journaled.ObjectConditions{Reader: mgr.GetCache(), Kinds: kinds, Active: leading.Load})
	}
	for _, c := range collectors {
		// A second run in one process (tests) finds the first's: keep it.
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return err
		}
	}
	leaderGauge.Set(0)
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		select {
		case <-mgr.Elected():
			leaderGauge.Set(1)
			leading.Store(true)
		case <-ctx.Done():
		}
		<-ctx.Done()
		leaderGauge.Set(0)
		leading.Store(false)
		return nil
	}))
}
