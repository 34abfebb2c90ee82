package main

// The OpenSandbox part of the demo: the spec-validating OpenSandbox test
// server (integration/opensandbox) runs in this process, the manager's
// opensandbox executor reaches it through an OpenSandbox JobClass, and one
// Job runs as one command in one sandbox of it, shown like the Kubernetes
// Jobs (its conditions and exit code, watched; the `kubectl get` tables;
// its references; its journal timeline; the TTL deleting it, and with it
// the sandbox).

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	osexec "git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/integration"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
)

const (
	// osClassName names the OpenSandbox JobClass and its parameters.
	osClassName = "sandbox"
	// osJobName is the demo's OpenSandbox Job (in jobsNamespace).
	osJobName = "hello-sandbox"
	// osAPIKey is the test server's API key, put into the Secret the
	// parameters name (a throwaway of this run; never printed).
	osAPIKey = "demo-opensandbox-key"
	// osSecretName is that Secret, in the manager's namespace.
	osSecretName = "opensandbox-api-key"
)

// startOpenSandbox starts the spec-validating OpenSandbox test server on
// 127.0.0.1; its files root becomes the manager's --opensandbox-marker-dir
// (the server serves files only there).
func startOpenSandbox() (*ostest.Server, error) {
	return ostest.New(ostest.Options{APIKeys: []string{osAPIKey}})
}

// osManagerArgs are the manager flags the OpenSandbox test server needs.
func osManagerArgs(srv *ostest.Server) []string {
	return []string{"--opensandbox-marker-dir=" + srv.FilesRoot()}
}

// applyOpenSandbox creates the OpenSandbox class (the API key Secret, the
// OpenSandboxExecutionParameters pointing at srv, the JobClass), waits
// until the class is Ready (its probe listed sandboxes with the key) and
// creates the OpenSandbox Job with ttl (ttlSecondsAfterFinished).
func applyOpenSandbox(ctx context.Context, s *integration.Stack, srv *ostest.Server, ttl int32) error {
	c := s.CP.Client
	section(fmt.Sprintf("an OpenSandbox JobClass against the spec-validating OpenSandbox test server (in this process, %s)", srv.URL()))
	say("the test server validates every request and response against the OpenSandbox OpenAPI specs and runs each command as a real process")
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: integration.ControllerNamespace, Name: osSecretName},
			Data: map[string][]byte{"api-key": []byte(osAPIKey)}},
		&executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: osClassName},
			Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: srv.URL(), AllowInsecureHTTP: true,
				APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: integration.ControllerNamespace, Name: osSecretName, Key: "api-key"}}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: osClassName},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerOpenSandbox,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: osexec.ParametersKind, Name: osClassName}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
		switch o := o.(type) {
		case *corev1.Secret:
			say("Secret %s/%s (the server's API key, not printed)", o.Namespace, o.Name)
		case *executionv1alpha1.OpenSandboxExecutionParameters:
			say("OpenSandboxExecutionParameters %s: endpoint %s, allowInsecureHTTP (loopback), apiKeySecretRef %s/%s", o.Name, o.Spec.Endpoint, integration.ControllerNamespace, osSecretName)
		case *executionv1alpha1.JobClass:
			say("JobClass %s: controllerName %s", o.Name, o.Spec.ControllerName)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		jc := &executionv1alpha1.JobClass{}
		if err := c.Get(ctx, types.NamespacedName{Name: osClassName}, jc); err != nil {
			return err
		}
		if r := meta.FindStatusCondition(jc.Status.Conditions, executionv1alpha1.JobClassConditionReady); r != nil && r.Status == metav1.ConditionTrue {
			say("JobClass %s Ready=True (%s): the probe reached the server with the key", osClassName, r.Reason)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JobClass %s not Ready after a minute: %+v\nmanager log tail:\n%s", osClassName, jc.Status.Conditions, integration.Tail(s.ManagerLog, 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: osJobName},
		Spec: executionv1alpha1.JobSpec{JobClassName: osClassName, TTLSecondsAfterFinished: &ttl,
			Task: executionv1alpha1.TaskSpec{Image: "registry.example/tools:1", Command: []string{"bash", "-c", "echo hello from a sandbox"}}}}
	if err := c.Create(ctx, j); err != nil {
		return err
	}
	say("Job %s/%s: jobClassName %s, image %s, command %q", jobsNamespace, osJobName, osClassName, j.Spec.Task.Image, j.Spec.Task.Command)
	return nil
}

// showOpenSandbox prints the OpenSandbox Job's execution status (adapter
// and references: a sandbox id and a command id, never an endpoint, a
// token or a key) and what the server saw, and checks one sandbox for the
// Job's UID, one command in it and no spec violation.
func showOpenSandbox(srv *ostest.Server, d *demoJob) error {
	j := d.done
	section(fmt.Sprintf("kubectl get ajob -n %s %s -o jsonpath='{.status.execution}'   (its references; and what the OpenSandbox server saw)", jobsNamespace, osJobName))
	refs := map[string]string{}
	adapter := "<none>"
	if j.Status.Execution != nil {
		adapter = j.Status.Execution.Adapter
		for _, r := range j.Status.Execution.References {
			refs[r.Type] = r.ID
			fmt.Printf("    reference  %-8s %s\n", r.Type, r.ID)
		}
	}
	fmt.Printf("    adapter    %s\n", adapter)
	sandboxes := srv.CreatedSandboxes(osexec.LabelJobUID, string(j.UID))
	commands := srv.Commands(refs["Sandbox"])
	violations := srv.Violations()
	fmt.Printf("    server     %d sandbox created with the Job's UID in its metadata, %d command started in it, %d requests, %d spec violations\n",
		sandboxes, commands, len(srv.Requests()), len(violations))
	switch {
	case adapter != "opensandbox" || refs["Sandbox"] == "" || refs["Command"] == "":
		return fmt.Errorf("Job %s: status.execution %+v, want adapter opensandbox with a Sandbox and a Command reference", osJobName, j.Status.Execution)
	case sandboxes != 1 || commands != 1:
		return fmt.Errorf("Job %s: %d sandboxes and %d commands, want one of each", osJobName, sandboxes, commands)
	case len(violations) > 0:
		return fmt.Errorf("the OpenSandbox server saw %d spec violations:\n  %s", len(violations), strings.Join(violations, "\n  "))
	}
	return nil
}

// sandboxDeleted checks that the TTL's deletion of the OpenSandbox Job
// deleted its sandbox, and that the server saw no spec violation.
func sandboxDeleted(srv *ostest.Server, d *demoJob) error {
	var sb string
	for _, r := range d.done.Status.Execution.References {
		if r.Type == "Sandbox" {
			sb = r.ID
		}
	}
	if srv.SandboxDir(sb) != "" {
		return fmt.Errorf("sandbox %s outlived its Job %s", sb, osJobName)
	}
	if v := srv.Violations(); len(v) > 0 {
		return fmt.Errorf("the OpenSandbox server saw %d spec violations:\n  %s", len(v), strings.Join(v, "\n  "))
	}
	say("sandbox %s was deleted with Job %s/%s; the OpenSandbox server saw %d requests, no spec violation", sb, jobsNamespace, osJobName, len(srv.Requests()))
	return nil
}
