//go:build !unit

// Package monitoring_test fires the shipped alert rules on a real
// Prometheus (PROMETHEUS_VERSION, built by make tools) that scrapes a real
// manager of the local stack, and runs every dashboard query against it.
package monitoring_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/model"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/deploy/monitoring"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// scaledRules is the shipped rule file with every `for` divided by 60
// (minutes become seconds) and groups evaluated every second: the
// expressions, labels and annotations are exactly the shipped ones; the
// shipped `for` durations are covered by the promtool unit tests.
func scaledRules(t *testing.T) []byte {
	t.Helper()
	b, err := monitoring.ScaledRuleFile("1s", 60)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	// canaryName is a user object's name that must never become a label.
	canaryName = "canaryobject7f3a"
	// envCanary is a Secret value a Job's env references.
	envCanary = "CANARY-metrics-secret-0c4e1b"
)

// TestAlertsOnRealPrometheus: a real Prometheus scrapes the stack's real
// manager and evaluates the shipped rules. Each fault fires its alert and
// the alert resolves once the fault is removed:
//
//   - NATS stopped → AyatoriJournalUnavailable; NATS back → resolved;
//   - a foreign role pre-created, a Tenant asking for it → AyatoriTenantConflict;
//     the Tenant deleted → resolved;
//   - a running Job's native batch/v1 Job deleted → AyatoriJobResultUnknown;
//     the loss confirmed (Failed/BackendLost) → resolved.
//
// Then every dashboard panel's queries run against the same Prometheus
// after a small load (Tenants and Jobs) and must return series; and no
// secret value nor user object name appears in any label, alert or the
// metrics page (canary scan).
func TestAlertsOnRealPrometheus(t *testing.T) {
	integration.Servers(t)
	integration.QuietControllerRuntimeLog()
	ctx := context.Background()
	s, err := integration.StartStack(ctx, integration.StackOptions{
		ManagerArgs: []string{"--retry-base=300ms", "--retry-max=3s", "--executor-ack-wait=5s", "--tenant-resync-interval=5s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := s.CP.Client
	applyInstance(t, s)
	applyJobClass(t, s)

	metricsURL, err := url.Parse(s.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := integration.NewPrometheus(integration.PrometheusOptions{
		// The journal probe waits up to 2 s for an unreachable stream: the
		// scrape's timeout (its interval) must exceed that.
		ScrapeInterval: 3 * time.Second, EvalInterval: time.Second,
		Targets: []integration.PrometheusTarget{{Address: metricsURL.Host,
			Labels: map[string]string{"namespace": integration.ControllerNamespace, "pod": "ayatori-manager-0"}}},
		RuleFile: scaledRules(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pr.Close)
	wantAlert := func(t *testing.T, name, state string, timeout time.Duration) model.LabelSet {
		t.Helper()
		start := time.Now()
		labels, err := pr.WaitAlert(ctx, name, state, timeout)
		if err != nil {
			t.Fatalf("%v\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 20))
		}
		what := state
		if what == "" {
			what = "inactive"
		}
		t.Logf("%s %s after %s %v", name, what, time.Since(start).Round(100*time.Millisecond), labels)
		return labels
	}
	// Healthy: none of the three fires.
	if _, err := pr.WaitAlert(ctx, "AyatoriManagerNoLeader", "", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"AyatoriJournalUnavailable", "AyatoriTenantConflict", "AyatoriJobResultUnknown"} {
		if st, _, err := pr.Alert(ctx, a); err != nil || st != "" {
			t.Fatalf("%s is %q on a healthy stack (err %v)", a, st, err)
		}
	}

	t.Run("JournalUnavailable", func(t *testing.T) {
		if s.NATS == nil {
			t.Skip("the stack runs a NATS cluster")
		}
		s.NATS.Stop()
		labels := wantAlert(t, "AyatoriJournalUnavailable", "firing", 90*time.Second)
		if labels["severity"] != "critical" || labels["pod"] != "ayatori-manager-0" {
			t.Errorf("labels %v", labels)
		}
		if err := s.NATS.Start(); err != nil {
			t.Fatal(err)
		}
		wantAlert(t, "AyatoriJournalUnavailable", "", 90*time.Second)
	})

	t.Run("TenantConflict", func(t *testing.T) {
		superExec(t, s, "CREATE ROLE foreign_app LOGIN PASSWORD 'foreign-role-pw'")
		ns(t, s, "conflict")
		tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "conflict", Name: canaryName},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared", LoginRole: "foreign_app"}}
		if err := c.Create(ctx, tn); err != nil {
			t.Fatal(err)
		}
		waitTenant(t, s, "conflict", canaryName, "Conflict")
		wantAlert(t, "AyatoriTenantConflict", "firing", 2*time.Minute)
		e := why(t, s, "tenant/"+canaryName, "-n", "conflict")
		if e.Condition.Status != "False" || e.Condition.Reason != "Conflict" || !strings.HasSuffix(e.Runbook, "#ayatoritenantconflict") ||
			!strings.Contains(e.Action, "A human decides") || e.LastOutcome == nil || e.LastOutcome.Reason != "Conflict" {
			t.Errorf("why of a Tenant in Conflict: %+v", e)
		}
		if err := c.Delete(ctx, tn); err != nil {
			t.Fatal(err)
		}
		wantAlert(t, "AyatoriTenantConflict", "", 2*time.Minute)
	})

	t.Run("JobResultUnknown", func(t *testing.T) {
		jobNamespace(t, s, "lost")
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "lost", Name: canaryName},
			Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: integration.ImageHang, Command: []string{"/bin/task"}}}}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		waitJob(t, s, j, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		var natives batchv1.JobList
		if err := c.List(ctx, &natives, client.InNamespace("lost")); err != nil || len(natives.Items) != 1 {
			t.Fatalf("native Jobs: %d, %v", len(natives.Items), err)
		}
		bg := metav1.DeletePropagationBackground
		if err := c.Delete(ctx, &natives.Items[0], &client.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		wantAlert(t, "AyatoriJobResultUnknown", "firing", 2*time.Minute)
		e := why(t, s, "job/"+canaryName, "-n", "lost")
		if e.Condition.Reason != "ResultUnknown" || !strings.Contains(e.Action, "confirm-backend-lost="+e.UID) ||
			!strings.HasSuffix(e.Runbook, "#ayatorijobresultunknown") || !strings.Contains(e.WaitingFor, "administrator") {
			t.Errorf("why of a Job in ResultUnknown: %+v", e)
		}
		cur := &executionv1alpha1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(j), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Annotations = map[string]string{executionv1alpha1.AnnotationBackendLost: string(cur.UID)}
		if err := c.Patch(ctx, cur, patch); err != nil {
			t.Fatal(err)
		}
		waitJob(t, s, j, func(j *executionv1alpha1.Job) bool { return j.Status.CompletionTime != nil })
		wantAlert(t, "AyatoriJobResultUnknown", "", 2*time.Minute)
	})

	t.Run("DashboardQueries", func(t *testing.T) {
		// A small bench: Tenants provisioned and Jobs run to their end
		// (one of them with a Secret env, one deleted by its TTL).
		ns(t, s, "bench")
		for i := range 5 {
			tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("app%d", i)},
				Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}
			if err := c.Create(ctx, tn); err != nil {
				t.Fatal(err)
			}
		}
		jobNamespace(t, s, "batch")
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "env"},
			StringData: map[string]string{"token": envCanary}}); err != nil {
			t.Fatal(err)
		}
		ttl := int32(0)
		var jobs []*executionv1alpha1.Job
		for i := range 5 {
			j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: fmt.Sprintf("run-%d", i)},
				Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: integration.ImageSucceed, Command: []string{"/bin/task"},
					Env: []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "env"}, Key: "token"}}}}}}}
			if i == 0 {
				j.Spec.TTLSecondsAfterFinished = &ttl
			}
			if err := c.Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, j)
		}
		for i := range 5 {
			waitTenantReady(t, s, "bench", fmt.Sprintf("app%d", i))
		}
		for _, j := range jobs[1:] {
			waitJob(t, s, j, func(j *executionv1alpha1.Job) bool { return j.Status.CompletionTime != nil })
		}
		// Two scrapes after the load, so every rate has two samples.
		time.Sleep(7 * time.Second)
		panels, err := monitoring.Panels()
		if err != nil {
			t.Fatal(err)
		}
		queries := 0
		for _, p := range panels {
			for _, q := range p.Queries {
				queries++
				q = strings.NewReplacer("$namespace", ".*", "$__rate_interval", "1m", "${datasource}", "").Replace(q)
				var v model.Value
				err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					var qerr error
					v, qerr = pr.Query(ctx, q)
					if qerr != nil {
						return false, qerr
					}
					vec, ok := v.(model.Vector)
					return ok && len(vec) > 0, nil
				})
				if err != nil {
					t.Errorf("panel %q: query %s: %v (last result %v)", p.Title, q, err, v)
				}
			}
		}
		t.Logf("%d panels, %d queries, each returned series", len(panels), queries)
	})

	t.Run("KubectlAyatori", func(t *testing.T) {
		// Ready.
		e := why(t, s, "tenant/app0", "-n", "bench")
		if e.Condition.Status != "True" || e.Condition.Reason != "Ready" || !strings.HasPrefix(e.Action, "Nothing") || len(e.Pending) != 0 ||
			e.LastOutcome == nil || e.Untrusted != 0 || e.Records == 0 {
			t.Errorf("why of a Ready Tenant: %+v", e)
		}
		out := plugin(t, s, 0, "why", "pgtenant/app0", "-n", "bench")
		for _, want := range []string{"PostgreSQLTenant bench/app0", "Ready=True", "Last outcome:", "Do:"} {
			if !strings.Contains(out, want) {
				t.Errorf("why (text) lacks %q:\n%s", want, out)
			}
		}
		if out := plugin(t, s, 0, "timeline", "tenant/app0", "-n", "bench"); !strings.Contains(out, "CreateDatabase") {
			t.Errorf("timeline:\n%s", out)
		}
		if out := plugin(t, s, 0, "verify", "tenant/app0", "-n", "bench"); !strings.Contains(out, "OK") {
			t.Errorf("verify:\n%s", out)
		}
		if out := plugin(t, s, 3, "why", "tenant/nope", "-n", "bench"); !strings.Contains(out, "not found") {
			t.Errorf("why of a missing object:\n%s", out)
		}

		// Waiting on an Instance.
		if err := c.Create(ctx, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "waits"},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "missing"}}); err != nil {
			t.Fatal(err)
		}
		e = whyUntil(t, s, func(e explanation) bool { return e.Condition.Reason == "InstanceNotReady" }, "tenant/waits", "-n", "bench")
		if !strings.Contains(e.WaitingFor, `PostgreSQLInstance "missing"`) || !strings.Contains(e.Action, "why instance/missing") {
			t.Errorf("why of a Tenant waiting on an Instance: %+v", e)
		}

		// A Job being cancelled: its pod takes 20 s to stop, so the
		// Cancelling window outlasts the `why` calls of a slow machine.
		jobNamespace(t, s, "cancel")
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "cancel", Name: "stop-me"},
			Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: integration.ImageSlowStop, Command: []string{"/bin/task"}}}}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		waitJob(t, s, j, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace("cancel")); err != nil || len(pods.Items) != 1 {
			t.Fatalf("the pod of Job cancel/stop-me: %d pods, %v", len(pods.Items), err)
		}
		pod := &pods.Items[0]
		podPatch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[integration.AnnotationStopDelay] = "20s"
		if err := c.Patch(ctx, pod, podPatch); err != nil {
			t.Fatal(err)
		}
		cur := &executionv1alpha1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(j), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		if err := c.Patch(ctx, cur, patch); err != nil {
			t.Fatal(err)
		}
		e = whyUntil(t, s, func(e explanation) bool { return e.Condition.Reason == "Cancelling" }, "ajob/stop-me", "-n", "cancel")
		if !strings.Contains(e.Action, "stop was requested") {
			t.Errorf("why of a cancelling Job: %+v", e)
		}
		waitJob(t, s, j, func(j *executionv1alpha1.Job) bool { return j.Status.CompletionTime != nil })

		// PostgreSQL down: the Ready Tenant's re-check finds it unreachable.
		s.PG.Stop()
		e = whyUntil(t, s, func(e explanation) bool { return e.Condition.Reason == "DependencyUnavailable" }, "tenant/app1", "-n", "bench")
		if !strings.Contains(e.Action, "Restore the backend") || !strings.Contains(e.Runbook, "#ayatori") {
			t.Errorf("why of a Tenant whose PostgreSQL is down: %+v", e)
		}
		if err := s.PG.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitTenantReady(t, s, "bench", "app1")
	})

	t.Run("CanaryScan", func(t *testing.T) {
		secrets := []string{envCanary, s.AdminPassword}
		var kv []string
		for i := range 5 {
			if pw := kvPassword(t, s, "bench", fmt.Sprintf("app%d", i)); pw != "" {
				kv = append(kv, pw)
			}
		}
		if len(kv) == 0 {
			t.Fatal("no Tenant password read from OpenBao to scan for")
		}
		secrets = append(secrets, kv...)
		var pages []string
		// PostgreSQL was down a moment ago: a Tenant whose re-check ran
		// then is re-running its steps; replay compares settled ones.
		waitTenantReady(t, s, "bench", "app2")
		waitTenantReady(t, s, "bench", "app3")
		for _, ref := range []string{"tenant/app2", "tenant/app3"} {
			pages = append(pages, plugin(t, s, 0, "why", ref, "-n", "bench"), plugin(t, s, 0, "why", ref, "-n", "bench", "-o", "yaml"),
				plugin(t, s, 0, "timeline", ref, "-n", "bench"), plugin(t, s, 0, "replay", ref, "-n", "bench"))
		}
		for _, u := range []string{s.MetricsURL, pr.URL + "/api/v1/alerts", pr.URL + "/api/v1/rules",
			pr.URL + "/api/v1/series?match[]=" + url.QueryEscape(`{__name__=~"ayatori_.+"}`)} {
			pages = append(pages, get(t, u))
		}
		var names struct {
			Data []string `json:"data"`
		}
		if err := json.Unmarshal([]byte(get(t, pr.URL+"/api/v1/labels")), &names); err != nil {
			t.Fatal(err)
		}
		for _, n := range names.Data {
			pages = append(pages, get(t, pr.URL+"/api/v1/label/"+n+"/values"))
		}
		for i, p := range pages {
			for _, secret := range secrets {
				if strings.Contains(p, secret) {
					t.Errorf("a secret value is in page %d (plugin output, metrics, alerts, rules, series or label values)", i)
				}
			}
			for _, name := range []string{canaryName, "app1", "run-1"} {
				if i >= 8 && strings.Contains(p, name) {
					t.Errorf("the user object name %q is in page %d (metrics, alerts, rules, series or label values)", name, i)
				}
			}
		}
		t.Logf("scanned %d pages for %d secret values and 3 object names", len(pages), len(secrets))
	})
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", u, resp.Status, err)
	}
	return string(b)
}

func applyInstance(t *testing.T, s *integration.Stack) {
	t.Helper()
	ctx := context.Background()
	c := s.CP.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared-admin", Namespace: integration.ControllerNamespace},
		StringData: map[string]string{"username": s.AdminUser, "password": s.AdminPassword}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		i := &databasev1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: "shared"}, i); err != nil {
			return false, nil
		}
		return i.Status.Phase == databasev1alpha1.InstancePhaseReady, nil
	}); err != nil {
		t.Fatalf("Instance not Ready: %v\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
}

func applyJobClass(t *testing.T, s *integration.Stack) {
	t.Helper()
	for _, o := range []client.Object{
		&executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "std"},
			Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "ayatori-job"}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "std", Annotations: map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "true"}},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}}},
	} {
		if err := s.CP.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func ns(t *testing.T, s *integration.Stack, name string) {
	t.Helper()
	if err := s.CP.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// jobNamespace creates a namespace with the class's ServiceAccount.
func jobNamespace(t *testing.T, s *integration.Stack, name string) {
	t.Helper()
	ns(t, s, name)
	if err := s.CP.Client.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "ayatori-job"}}); err != nil {
		t.Fatal(err)
	}
}

func waitJob(t *testing.T, s *integration.Stack, j *executionv1alpha1.Job, cond func(*executionv1alpha1.Job) bool) {
	t.Helper()
	var last executionv1alpha1.Job
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(j), &last); err != nil {
			return false, nil
		}
		return cond(&last), nil
	}); err != nil {
		b, _ := json.Marshal(last.Status)
		t.Fatalf("Job %s/%s: %v; status %s\n%s", j.Namespace, j.Name, err, b, integration.Tail(s.ManagerLog, 20))
	}
}

func waitTenantReady(t *testing.T, s *integration.Stack, namespace, name string) {
	t.Helper()
	waitTenant(t, s, namespace, name, databasev1alpha1.ReasonReady)
}

// waitTenant waits until the Tenant's Ready reason is reason.
func waitTenant(t *testing.T, s *integration.Stack, namespace, name, reason string) {
	t.Helper()
	var last databasev1alpha1.PostgreSQLTenant
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.CP.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &last); err != nil {
			return false, nil
		}
		for _, c := range last.Status.Conditions {
			if c.Type == databasev1alpha1.ConditionReady && c.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		b, _ := json.Marshal(last.Status)
		t.Fatalf("Tenant %s/%s never Ready reason %s: %v; status %s\n%s", namespace, name, reason, err, b, integration.Tail(s.ManagerLog, 20))
	}
}

func superExec(t *testing.T, s *integration.Stack, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// kvPassword reads a Tenant's password from OpenBao (root token), for the
// canary scan only.
func kvPassword(t *testing.T, s *integration.Stack, namespace, name string) string {
	t.Helper()
	root, err := s.Bao.Client(s.Bao.RootToken)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := root.KVv2(integration.KVMount).Get(context.Background(), integration.TenantBasePath+"/"+namespace+"/"+name)
	if err != nil || sec == nil {
		return ""
	}
	pw, _ := sec.Data["password"].(string)
	return pw
}

// explanation mirrors kubectl-ayatori's why -o json.
type explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Condition struct {
		Type, Status, Reason, Message string
	} `json:"condition"`
	Phase       string `json:"phase"`
	LastIntent  *step  `json:"lastIntent"`
	LastOutcome *step  `json:"lastOutcome"`
	Pending     []step `json:"pending"`
	WaitingFor  string `json:"waitingFor"`
	Action      string `json:"action"`
	Runbook     string `json:"runbook"`
	Records     int    `json:"journalRecords"`
	Untrusted   int    `json:"untrustedRecords"`
}

type step struct {
	Operation, Result, Reason, Message string
	Attempt                            int
}

// plugin runs kubectl-ayatori with the stack's kubeconfig and the
// journal's read-only identity and wants exit status code.
func plugin(t *testing.T, s *integration.Stack, code int, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.PluginBin, append(s.PluginArgs(), args...)...)
	out, err := cmd.CombinedOutput()
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if got != code {
		t.Fatalf("kubectl-ayatori %s: exit status %d, want %d\n%s", strings.Join(args, " "), got, code, out)
	}
	return string(out)
}

func why(t *testing.T, s *integration.Stack, args ...string) explanation {
	t.Helper()
	var e explanation
	out := plugin(t, s, 0, append(append([]string{"why"}, args...), "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("why -o json: %v\n%s", err, out)
	}
	return e
}

// whyUntil asks why until cond holds (2 min).
func whyUntil(t *testing.T, s *integration.Stack, cond func(explanation) bool, args ...string) explanation {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		e := why(t, s, args...)
		if cond(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("why %v: last answer %+v\n%s", args, e, integration.Tail(s.ManagerLog, 20))
		}
		time.Sleep(300 * time.Millisecond)
	}
}
