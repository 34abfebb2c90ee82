package execution

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// CheckLive reads the Job an intent names through r and returns
// CheckIntent's verdict ("" when the intent may run); an error is a failed
// read (the delivery is retried), never a verdict. The manager's guard
// calls it with its cache, then, before refusing, with the API server.
func CheckLive(ctx context.Context, r client.Reader, rec journal.Record) (string, error) {
	job := &executionv1alpha1.Job{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, job); apierrors.IsNotFound(err) {
		job = nil
	} else if err != nil {
		return "", err
	}
	return CheckIntent(rec, job), nil
}

// CheckIntent compares a trusted intent of the domain with the live Job
// (nil: none of the record's namespace and name) and returns why it must
// not run ("" when it may). The record's proof says the manager wrote it;
// this check bounds what a stolen signing key could do: an intent acts
// only on the Job with the record's UID, a Cancel only for a reason the
// live Job gives (its author's cancel, its deadline, its deletion, or the
// backend's own failure report), a Delete only of a Job being deleted.
// An Ensure acts only with the class and parameters the Job was accepted
// with (status.resolvedJobClass, written before the Ensure is decided);
// the adapter re-reads the Job, its class and its parameters itself (task
// digest, class and parameters UIDs, ClassMismatch).
func CheckIntent(rec journal.Record, job *executionv1alpha1.Job) string {
	if rec.Object.Kind != "Job" {
		return fmt.Sprintf("no %s operation on kind %q", Domain, rec.Object.Kind)
	}
	if job == nil || string(job.UID) != rec.Object.UID {
		return fmt.Sprintf("the Job %s/%s with uid %s does not exist", rec.Object.Namespace, rec.Object.Name, rec.Object.UID)
	}
	switch rec.Operation {
	case OpCancel:
		var in ExecutionIntent
		if err := rec.DecodePayload(&in); err != nil {
			return "the payload does not decode"
		}
		switch in.Reason {
		case StopCancelled:
			if job.Spec.DesiredState != executionv1alpha1.JobDesiredStateCancelled {
				return "a Cancel of a Job whose desiredState is not Cancelled"
			}
		case StopDeadlineExceeded:
			if job.Spec.ActiveDeadlineSeconds == nil {
				return "a DeadlineExceeded Cancel of a Job without activeDeadlineSeconds"
			}
		case StopDeleted:
			if job.DeletionTimestamp == nil {
				return "a Deleted Cancel of a Job that is not being deleted"
			}
		case StopFailing:
		default:
			return fmt.Sprintf("a Cancel with reason %q", in.Reason)
		}
	case OpDelete:
		if job.DeletionTimestamp == nil {
			return "a Delete of a Job that is not being deleted"
		}
	case OpEnsure:
		var in EnsureIntent
		if err := rec.DecodePayload(&in); err != nil {
			return "the payload does not decode"
		}
		rc := job.Status.ResolvedJobClass
		if rc == nil || in.JobClass != rc.Name || in.JobClassUID != string(rc.UID) || in.ParametersKind != rc.ParametersRef.Kind ||
			in.ParametersName != rc.ParametersRef.Name || in.ParametersUID != string(rc.ParametersRef.UID) {
			return "an Ensure with a class or parameters the Job was not accepted with (status.resolvedJobClass)"
		}
	}
	return ""
}

// ClassMismatch says why the live class an Ensure names may not be run by
// the adapter of controllerName ("" when it may): its controllerName is
// another adapter's, or its parametersRef is not the parameters the
// intent names. Each adapter's Ensure calls it after reading the class by
// the intent's name and UID, so an intent routed to it by its payload's
// adapter field never runs under another adapter's class.
func ClassMismatch(class *executionv1alpha1.JobClass, in EnsureIntent, controllerName string) string {
	ref := class.Spec.ParametersRef
	switch {
	case class.Spec.ControllerName != controllerName:
		return fmt.Sprintf("JobClass %s belongs to controller %s, not %s", class.Name, class.Spec.ControllerName, controllerName)
	case ref.Kind != in.ParametersKind || ref.Name != in.ParametersName:
		return fmt.Sprintf("JobClass %s references %s %s, not the intent's %s %s", class.Name, ref.Kind, ref.Name, in.ParametersKind, in.ParametersName)
	}
	return ""
}
