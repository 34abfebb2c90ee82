package main

// The execution domain's part of the demo: a JobClass and three Jobs run as
// native batch/v1 Jobs by the manager's Kubernetes executor on the stack's
// workload processes (kube-controller-manager, kube-scheduler, kwok fake
// node), one succeeding, one exiting 3, one cancelled while it runs; and
// one Job on an OpenSandbox class, run by the manager's opensandbox
// executor as one command in one sandbox of the spec-validating OpenSandbox
// test server (opensandbox.go); their `kubectl get` table, the OpenSandbox
// Job's references, journal timelines, then (make demo only) the TTL
// controller deleting the finished Jobs.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
)

// demoTTL is the ttlSecondsAfterFinished of the demo's Jobs under make
// demo; make dev keeps the samples' (an hour) so the Jobs stay explorable.
const demoTTL = 20

// jobsNamespace is the namespace of job-hello.yaml (with the ServiceAccount
// ayatori-job the default class's parameters name).
const jobsNamespace = "hello"

// demoJob is one Job of the demo and what it must end with.
type demoJob struct {
	name, image string
	// cancel: wait until it runs, then set spec.desiredState Cancelled.
	cancel bool
	// want is the terminal Succeeded condition, status/reason; class the
	// JobClass it must resolve to.
	want, class string
	// exitCode is the expected status.result.exitCode (nil: not checked).
	exitCode *int32
	// done is the Job as it ended.
	done *executionv1alpha1.Job
}

func (d *demoJob) key() types.NamespacedName {
	return types.NamespacedName{Namespace: jobsNamespace, Name: d.name}
}

func int32p(v int32) *int32 { return &v }

// runJobs applies the execution samples and the demo's Jobs, waits for
// each Job's expected end and prints what a user sees. keep (make dev)
// leaves the samples' TTL of an hour in place. The OpenSandbox Job runs on
// srv.
func runJobs(ctx context.Context, s *integration.Stack, srv *ostest.Server, samples string, keep bool) ([]*demoJob, error) {
	c := s.CP.Client
	jobs := []*demoJob{
		{name: "hello", image: integration.ImageSucceed, class: "default", want: "True/" + executionv1alpha1.ReasonCompleted, exitCode: int32p(0)},
		{name: "fail", image: integration.ImageExit, class: "default", want: "False/" + executionv1alpha1.ReasonProcessFailed, exitCode: int32p(3)},
		{name: "sleep", image: integration.ImageHang, class: "default", cancel: true, want: "False/" + executionv1alpha1.ReasonCancelled},
		{name: osJobName, class: osClassName, want: "True/" + executionv1alpha1.ReasonCompleted, exitCode: int32p(0)},
	}
	byName := map[string]*demoJob{}
	for _, j := range jobs {
		byName[j.name] = j
	}

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched, err := watchJobs(wctx, s)
	if err != nil {
		return nil, err
	}

	section("applying the execution samples with the Kubernetes API (a JobClass, a namespace, three Jobs)")
	ttl := "the samples' ttlSecondsAfterFinished (make dev: they stay explorable)"
	if !keep {
		ttl = fmt.Sprintf("ttlSecondsAfterFinished: %d", demoTTL)
	}
	say("the fake node runs each pod by its image: %s exits 0, %s exits with $%s, %s runs until stopped; %s",
		integration.ImageSucceed, integration.ImageExit, integration.EnvExitCode, integration.ImageHang, ttl)
	for _, f := range []string{"jobclass-default.yaml", "job-hello.yaml", "job-sleep.yaml"} {
		objs, err := load(filepath.Join(samples, f))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() == "Job" {
				d := byName[o.GetName()]
				if d == nil || o.GetNamespace() != jobsNamespace {
					return nil, fmt.Errorf("%s: unexpected Job %s/%s", f, o.GetNamespace(), o.GetName())
				}
				// Run the sample on the fake node: its image picks the pod's behaviour.
				_ = unstructured.SetNestedField(o.Object, d.image, "spec", "task", "image")
				if !keep {
					_ = unstructured.SetNestedField(o.Object, int64(demoTTL), "spec", "ttlSecondsAfterFinished")
				}
				say("%s: Job %s/%s (image -> %s)", f, o.GetNamespace(), o.GetName(), d.image)
			} else {
				say("%s: %s %s", f, o.GetKind(), strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
			}
			if err := c.Create(ctx, o); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	// The failing Job has no sample file; it is the hello Job with an exit code.
	fail := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: "fail"},
		Spec: executionv1alpha1.JobSpec{
			Task: executionv1alpha1.TaskSpec{Image: integration.ImageExit, Command: []string{"sh", "-c", "exit 3"},
				Env: []executionv1alpha1.EnvVar{{Name: integration.EnvExitCode, Value: ptr("3")}}},
			TTLSecondsAfterFinished: int32p(3600),
		}}
	if !keep {
		fail.Spec.TTLSecondsAfterFinished = int32p(demoTTL)
	}
	if err := c.Create(ctx, fail); err != nil {
		return nil, err
	}
	say("Job %s/fail (image %s, env %s=3)", jobsNamespace, integration.ImageExit, integration.EnvExitCode)
	osTTL := int32(3600)
	if !keep {
		osTTL = demoTTL
	}
	if err := applyOpenSandbox(ctx, s, srv, osTTL); err != nil {
		return nil, err
	}

	section("waiting for each Job's end (every condition change, watched); cancelling sleep once it runs")
	for _, d := range jobs {
		if !d.cancel {
			continue
		}
		if _, err := waitJob(ctx, c, d.key(), "Succeeded=Unknown/Running", 2*time.Minute, func(j *executionv1alpha1.Job) bool {
			return succeededOf(j) == "Unknown/"+executionv1alpha1.ReasonRunning
		}); err != nil {
			return nil, fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 30))
		}
		say("kubectl patch ajob -n %s %s --type merge -p '{\"spec\":{\"desiredState\":\"Cancelled\"}}'", jobsNamespace, d.name)
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"desiredState":"Cancelled"}}`))
		if err := c.Patch(ctx, &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: d.name}}, patch); err != nil {
			return nil, err
		}
	}
	for _, d := range jobs {
		j, err := waitJob(ctx, c, d.key(), "a terminal Succeeded condition", 3*time.Minute, func(j *executionv1alpha1.Job) bool {
			return j.Status.CompletionTime != nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 30))
		}
		d.done = j
	}
	stopWatch()
	<-watched

	section("kubectl get jobclass")
	if err := printTable(ctx, s, "/apis/execution.ayatori.ddupan.top/v1alpha1/jobclasses", false, false); err != nil {
		return nil, err
	}
	section("kubectl get ajob -A -o wide   (job.execution.ayatori.ddupan.top; -o wide adds the exit code)")
	if err := printTable(ctx, s, "/apis/execution.ayatori.ddupan.top/v1alpha1/jobs", true, true); err != nil {
		return nil, err
	}
	section("kubectl get jobs.batch -n " + jobsNamespace + "   (the native Jobs the Kubernetes executor created, one per Ayatori Job UID of the default class)")
	if err := printTable(ctx, s, "/apis/batch/v1/namespaces/"+jobsNamespace+"/jobs", false, false); err != nil {
		return nil, err
	}

	var bad []string
	for _, d := range jobs {
		j := d.done
		line := fmt.Sprintf("%-13s class=%-7s Accepted=%s Scheduled=%s Succeeded=%s exitCode=%s", d.name, classOf(j),
			condOf(j, executionv1alpha1.JobConditionAccepted), condOf(j, executionv1alpha1.JobConditionScheduled), succeededOf(j), exitOf(j))
		ok := succeededOf(j) == d.want && classOf(j) == d.class && strings.HasPrefix(condOf(j, executionv1alpha1.JobConditionAccepted), "True") &&
			strings.HasPrefix(condOf(j, executionv1alpha1.JobConditionScheduled), "True")
		if d.exitCode != nil && exitOf(j) != fmt.Sprint(*d.exitCode) {
			ok = false
		}
		want := "want class=" + d.class + ", Succeeded=" + d.want
		if d.exitCode != nil {
			want += fmt.Sprintf(", exitCode=%d", *d.exitCode)
		}
		if ok {
			fmt.Printf("    ok    %s\n", line)
		} else {
			fmt.Printf("    WRONG %s   (%s)\n", line, want)
			bad = append(bad, d.name)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("Jobs %v did not end as expected\nmanager log tail:\n%s", bad, integration.Tail(s.ManagerLog, 30))
	}

	section(fmt.Sprintf("ayatori-journal timeline --kind Job -n %s --name hello   (Ensure, Observe until it ended, the Finished note)", jobsNamespace))
	if err := jobTimeline(ctx, s, "hello", "Ensure", "Observe", "Finished"); err != nil {
		return nil, err
	}

	if err := showOpenSandbox(srv, jobs[len(jobs)-1]); err != nil {
		return nil, err
	}
	section(fmt.Sprintf("ayatori-journal timeline --kind Job -n %s --name %s   (the same spine on the opensandbox executor: Ensure created the sandbox and started the command)", jobsNamespace, osJobName))
	if err := jobTimeline(ctx, s, osJobName, "Ensure", "Observe", "Finished"); err != nil {
		return nil, err
	}
	return jobs, nil
}

// waitTTL waits for the TTL controller to delete every finished Job:
// each must be gone within ttlSecondsAfterFinished + 30 s of its
// completionTime. Then it prints the hello Job's timeline again, now with
// the TTLExpired note and the Delete.
func waitTTL(ctx context.Context, s *integration.Stack, jobs []*demoJob) error {
	c := s.CP.Client
	section(fmt.Sprintf("waiting for the TTL controller to delete the finished Jobs (ttlSecondsAfterFinished: %d, each within ttl + 30 s of its completionTime)", demoTTL))
	for _, d := range jobs {
		deadline := d.done.Status.CompletionTime.Add(time.Duration(demoTTL+30) * time.Second)
		for {
			j := &executionv1alpha1.Job{}
			err := c.Get(ctx, d.key(), j)
			if client.IgnoreNotFound(err) != nil {
				return err
			}
			if err != nil {
				say("Job %s/%s deleted %.1fs after it finished", jobsNamespace, d.name, time.Since(d.done.Status.CompletionTime.Time).Seconds())
				break
			}
			if time.Now().After(deadline) {
				state := "no deletionTimestamp (nothing deleted it)"
				if j.DeletionTimestamp != nil {
					state = fmt.Sprintf("deletionTimestamp %s, finalizers %v", j.DeletionTimestamp.UTC().Format(time.RFC3339), j.Finalizers)
				}
				return fmt.Errorf("TTL: Job %s/%s still exists %s after it finished (ttlSecondsAfterFinished %d, timeout ttl + 30 s; %s): "+
					"this build's manager has no TTL controller for Ayatori Jobs, or it did not act\nmanager log tail:\n%s",
					jobsNamespace, d.name, time.Since(d.done.Status.CompletionTime.Time).Round(time.Second), demoTTL, state, integration.Tail(s.ManagerLog, 30))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	section(fmt.Sprintf("ayatori-journal timeline --kind Job -n %s --name hello   (now ending with the TTLExpired note and the Delete)", jobsNamespace))
	return jobTimeline(ctx, s, "hello", "Ensure", "Observe", "Finished", "TTLExpired", "Delete")
}

// jobTimeline prints `ayatori-journal timeline` of one Job and checks that
// every operation in want appears in it, in that order.
func jobTimeline(ctx context.Context, s *integration.Stack, name string, want ...string) error {
	var out bytes.Buffer
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, s.JournalBin, append(s.JournalReaderArgs(), "timeline", "--kind", "Job", "-n", jobsNamespace, "--name", name)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	os.Stdout.Write(out.Bytes())
	os.Stderr.Write(errOut.Bytes())
	if err != nil {
		return fmt.Errorf("ayatori-journal timeline of Job %s/%s: %w", jobsNamespace, name, err)
	}
	text := out.String()
	at := 0
	for _, op := range want {
		i := strings.Index(text[at:], op)
		if i < 0 {
			return fmt.Errorf("the timeline of Job %s/%s has no %s after the %v before it", jobsNamespace, name, op, want)
		}
		at += i + len(op)
	}
	return nil
}

// waitJob polls a Job until done holds.
func waitJob(ctx context.Context, c client.Client, nn types.NamespacedName, what string, timeout time.Duration, done func(*executionv1alpha1.Job) bool) (*executionv1alpha1.Job, error) {
	deadline := time.Now().Add(timeout)
	for {
		j := &executionv1alpha1.Job{}
		if err := c.Get(ctx, nn, j); err != nil {
			return nil, err
		}
		if done(j) {
			return j, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("Job %s: no %s after %s (Accepted=%s Scheduled=%s Succeeded=%s)", nn, what, timeout,
				condOf(j, executionv1alpha1.JobConditionAccepted), condOf(j, executionv1alpha1.JobConditionScheduled), succeededOf(j))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func condOf(j *executionv1alpha1.Job, typ string) string {
	c := meta.FindStatusCondition(j.Status.Conditions, typ)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

func succeededOf(j *executionv1alpha1.Job) string {
	return condOf(j, executionv1alpha1.JobConditionSucceeded)
}

func classOf(j *executionv1alpha1.Job) string {
	if j.Status.ResolvedJobClass == nil {
		return "<none>"
	}
	return j.Status.ResolvedJobClass.Name
}

func exitOf(j *executionv1alpha1.Job) string {
	if j.Status.Result == nil || j.Status.Result.ExitCode == nil {
		return "<none>"
	}
	return fmt.Sprint(*j.Status.Result.ExitCode)
}

func ptr[T any](v T) *T { return &v }

// watchJobs prints each change of a Job's conditions as the API server
// stores it, until ctx ends (the returned channel then closes).
func watchJobs(ctx context.Context, s *integration.Stack) (<-chan struct{}, error) {
	wc, err := client.NewWithWatch(s.CP.Config, client.Options{Scheme: s.CP.Scheme})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &executionv1alpha1.JobList{})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		last := map[string]string{}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				j, isJob := ev.Object.(*executionv1alpha1.Job)
				if !isJob || len(j.Status.Conditions) == 0 {
					continue
				}
				state := fmt.Sprintf("Accepted=%s Scheduled=%s Succeeded=%s", condOf(j, executionv1alpha1.JobConditionAccepted),
					condOf(j, executionv1alpha1.JobConditionScheduled), succeededOf(j))
				if j.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled {
					state += "  desiredState=Cancelled"
				}
				if j.Status.Result != nil && j.Status.Result.ExitCode != nil {
					state += fmt.Sprintf("  exitCode=%d", *j.Status.Result.ExitCode)
				}
				if key := j.Namespace + "/" + j.Name; state != last[key] {
					last[key] = state
					say("Job %s %s", key, state)
				}
			}
		}
	}()
	return done, nil
}
