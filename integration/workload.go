package integration

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kwokStages is the project's own kwok Stage file: pod behaviour keyed on
// the first container's image (see integration/kwok/stages.yaml).
//
//go:embed kwok/stages.yaml
var kwokStages []byte

// Images the kwok stages recognise (integration/kwok/stages.yaml).
const (
	// ImageSucceed runs, then exits 0.
	ImageSucceed = "ayatori.test/succeed"
	// ImageExit runs, then exits with the code in the container env
	// EnvExitCode (default 1).
	ImageExit = "ayatori.test/exit"
	// ImageHang runs until deleted.
	ImageHang = "ayatori.test/hang"
	// ImagePullFail stays Pending with its container waiting in ErrImagePull.
	ImagePullFail = "ayatori.test/pull-fail"
	// ImageSlowStop runs; on delete it stops after 3s, or after the Go
	// duration in the pod annotation AnnotationStopDelay.
	ImageSlowStop = "ayatori.test/slow-stop"

	// EnvExitCode is the container env variable read by ImageExit.
	EnvExitCode = "AYATORI_EXIT_CODE"
	// AnnotationStopDelay is the pod annotation read by ImageSlowStop.
	AnnotationStopDelay = "ayatori.test/stop-delay"

	// kwokNodeAnnotation marks the fake nodes kwok manages.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
)

// WorkloadControllers are the kube-controller-manager controllers a Workload
// runs: Jobs, the garbage collector (ownerReference cascades, foreground
// deletion), TTL after finished, pod GC, and the ServiceAccount controller
// (every namespace gets its "default" ServiceAccount, without which the
// ServiceAccount admission plugin rejects a Job's pods).
var WorkloadControllers = []string{
	"job-controller",
	"garbage-collector-controller",
	"ttl-after-finished-controller",
	"pod-garbage-collector-controller",
	"serviceaccount-controller",
}

// WorkloadOptions tune a Workload.
type WorkloadOptions struct {
	// Nodes is the number of fake nodes (default 1). Each has 4 CPUs,
	// 8Gi of memory and room for 110 pods.
	Nodes int
	// ControllerManagerArgs are extra kube-controller-manager flags (e.g.
	// --kube-api-qps for benchmarks).
	ControllerManagerArgs []string
}

// Workload makes a ControlPlane run workloads without Docker or a kubelet:
// kube-controller-manager (WorkloadControllers) and kube-scheduler built
// from k8s.io/kubernetes at the apiserver's version, and kwok playing the
// kubelet of fake nodes, its pods following the project's Stage file.
// Every process is a child with a parent-death signal, so none outlives a
// killed test binary.
type Workload struct {
	// CP is the control plane the processes run against.
	CP *ControlPlane
	// Nodes are the fake nodes' names (kwok-node-0, ...).
	Nodes []string
	// LogPaths are the processes' log files by name, for failure messages.
	LogPaths map[string]string

	dir   string
	procs []*process
	unreg func()
}

// NewWorkload starts the controller manager, the scheduler and kwok against
// cp, creates the fake nodes and waits until they are Ready and the
// "default" namespace has its ServiceAccount.
func NewWorkload(cp *ControlPlane, opts WorkloadOptions) (_ *Workload, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	bins := map[string]string{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
		if bins[name], err = ToolPath(name); err != nil {
			return nil, fmt.Errorf("%w (or: integration/tools/build.sh %s)", err, name)
		}
	}
	dir, err := os.MkdirTemp("", "ayatori-workload-")
	if err != nil {
		return nil, err
	}
	w := &Workload{CP: cp, dir: dir, LogPaths: map[string]string{}}
	w.unreg = registerCleanup(w.Close)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, w.logTails(20))
			w.Close()
		}
	}()
	stages := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o644); err != nil {
		return nil, err
	}
	kc := cp.KubeconfigPath
	kwokPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	specs := []processSpec{
		{name: "kube-controller-manager", path: bins["kube-controller-manager"], args: append([]string{
			"--kubeconfig=" + kc,
			"--controllers=" + strings.Join(WorkloadControllers, ","),
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		}, opts.ControllerManagerArgs...)},
		{name: "kube-scheduler", path: bins["kube-scheduler"], args: []string{
			"--kubeconfig=" + kc,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		}},
		{name: "kwok", path: bins["kwok"], args: []string{
			"--kubeconfig=" + kc,
			"--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			fmt.Sprintf("--server-address=127.0.0.1:%d", kwokPort),
		}, env: []string{"HOME=" + dir}}, // no ~/.kwok/kwok.yaml but ours
	}
	for _, s := range specs {
		s.dir = dir
		s.logPath = filepath.Join(dir, s.name+".log")
		w.LogPaths[s.name] = s.logPath
		p, err := startProcess(s)
		if err != nil {
			return nil, err
		}
		w.procs = append(w.procs, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: name},
		}}
		if err := cp.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		w.Nodes = append(w.Nodes, name)
	}
	if err := w.poll(ctx, "fake nodes Ready", func() (bool, error) {
		for _, name := range w.Nodes {
			n := &corev1.Node{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				return false, err
			}
			if !nodeReady(n) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, err
	}
	// The apiserver's TaintNodesByCondition admission taints a new node
	// not-ready; the node lifecycle controller (not run here: the fake nodes
	// send no heartbeats) would lift it once Ready. Lift it ourselves.
	for _, name := range w.Nodes {
		if err := liftNotReadyTaints(ctx, cp.Client, name); err != nil {
			return nil, fmt.Errorf("lift the not-ready taint of %s: %w", name, err)
		}
	}
	if err := w.WaitServiceAccount(ctx, "default"); err != nil {
		return nil, err
	}
	return w, nil
}

// liftNotReadyTaints removes the not-ready and unreachable taints from node
// name. Each try reads the node afresh; an update conflict (another writer,
// such as kwok's status patches, moved its resourceVersion) is retried with
// client-go's default back-off.
func liftNotReadyTaints(ctx context.Context, c client.Client, name string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error { return liftNotReadyTaintsOnce(ctx, c, name) })
}

func liftNotReadyTaintsOnce(ctx context.Context, c client.Client, name string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	var keep []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(n.Spec.Taints) {
		return nil
	}
	n.Spec.Taints = keep
	return c.Update(ctx, n)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitServiceAccount waits until namespace ns has its "default"
// ServiceAccount (made by the ServiceAccount controller), so pods can be
// created there.
func (w *Workload) WaitServiceAccount(ctx context.Context, ns string) error {
	return w.poll(ctx, "ServiceAccount "+ns+"/default", func() (bool, error) {
		err := w.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// CreateNamespace creates namespace ns and waits for its ServiceAccount.
func (w *Workload) CreateNamespace(ctx context.Context, ns string) error {
	if err := w.CP.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return w.WaitServiceAccount(ctx, ns)
}

// poll runs check every 100ms until it reports done, a process exits, or
// ctx ends.
func (w *Workload) poll(ctx context.Context, what string, check func() (bool, error)) error {
	var last error
	for {
		for _, p := range w.procs {
			if p.exited() {
				return fmt.Errorf("waiting for %s: %s exited: %v", what, p.name, p.waitErr)
			}
		}
		done, err := check()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pids returns the process IDs of the controller manager, the scheduler
// and kwok.
func (w *Workload) Pids() []int {
	var out []int
	for _, p := range w.procs {
		out = append(out, p.pid())
	}
	return out
}

func (w *Workload) logTails(n int) string {
	var b strings.Builder
	for _, p := range w.procs {
		fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", p.logPath, p.logTail(n))
	}
	return b.String()
}

// LogTails returns the last n lines of every process log.
func (w *Workload) LogTails(n int) string { return w.logTails(n) }

// Close stops the processes (the control plane is the caller's) and removes
// their files.
func (w *Workload) Close() {
	for i := len(w.procs) - 1; i >= 0; i-- {
		w.procs[i].stop(syscall.SIGTERM, 5*time.Second)
	}
	w.procs = nil
	if w.unreg != nil {
		w.unreg()
		w.unreg = nil
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
		w.dir = ""
	}
}
