package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
)

// The real cluster's fixed addresses. The node address is an extra /32 on
// lo (the kubelet refuses a loopback node IP); pods get 10.244.0.0/24 on
// the bridge cni0; Services 10.96.0.0/16, the apiserver at 10.96.0.1 and
// cluster DNS at 10.96.0.10.
const (
	RealClusterNodeIP      = "10.217.0.1"
	RealClusterNodeName    = "ayatori-e2e-node"
	RealClusterPodCIDR     = "10.244.0.0/24"
	RealClusterServiceCIDR = "10.96.0.0/16"
	RealClusterAPIServerIP = "10.96.0.1"
	RealClusterDNSIP       = "10.96.0.10"
	RealClusterDomain      = "cluster.local"
	// RealClusterSandboxImage is the pause image the node's containerd uses
	// for pod sandboxes (make images builds it).
	RealClusterSandboxImage = "docker.io/ayatori-test/pause:e2e"
	realClusterBridge       = "cni0"
)

// RealCluster is a Kubernetes cluster with one real node on this machine:
// etcd, kube-apiserver, kube-controller-manager (every default controller)
// and kube-scheduler as on any cluster, and a node made of a kubelet,
// kube-proxy (iptables), containerd 2 with Debian's runc and the bridge CNI
// plugin, all built at the pinned versions (integration/tools/versions.env,
// `integration/tools/build.sh e2e`). It needs root. Every process is a child
// with a parent-death signal; Close also removes what the node left on the
// host: containers, the bridge, iptables chains, cgroups, mounts and log
// links. Cluster DNS is not part of it: the caller deploys CoreDNS as pods.
type RealCluster struct {
	// Config is an admin rest.Config (system:masters).
	Config *rest.Config
	// Client has the Kubernetes and the project's types registered.
	Client client.Client
	// Scheme holds the registered types.
	Scheme *runtime.Scheme
	// KubeconfigPath is the admin kubeconfig (for kubectl).
	KubeconfigPath string
	// CAFile is the cluster CA (PEM) that signs the apiserver's serving
	// certificate.
	CAFile string
	// Dir holds every file of the cluster (state, logs, configuration).
	Dir string
	// LogPaths are the processes' log files by name.
	LogPaths map[string]string

	containerdSock string
	procs          map[string]*process
	order          []string
	addedNodeIP    bool
	unreg          func()
}

// RealClusterTools are the tools a RealCluster runs (build.sh names).
var RealClusterTools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kubelet", "kube-proxy", "kubectl", "containerd", "cni-plugins"}

// NewRealCluster starts the control plane and the node and waits until the
// node is Ready. dir must be a fresh directory on a file system that
// supports overlayfs (not tmpfs on some kernels); it is removed by Close.
func NewRealCluster(ctx context.Context, dir string) (_ *RealCluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the real cluster runs a kubelet and containerd: run as root")
	}
	bins := map[string]string{}
	for _, name := range RealClusterTools {
		if name == "cni-plugins" {
			continue
		}
		if bins[name], err = ToolPath(name); err != nil {
			return nil, fmt.Errorf("%w (or: integration/tools/build.sh e2e)", err)
		}
	}
	cniDir := ToolDir("cni-plugins")
	if _, err := os.Stat(filepath.Join(cniDir, "firewall")); err != nil {
		return nil, fmt.Errorf("CNI plugins are not built (%s): run integration/tools/build.sh e2e", cniDir)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, errors.New("runc is not installed: apt-get install runc")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &RealCluster{Dir: dir, LogPaths: map[string]string{}, procs: map[string]*process{}}
	c.unreg = registerCleanup(c.Close)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, c.logTails(25))
			c.Close()
		}
	}()
	if err := c.hostSetup(); err != nil {
		return nil, err
	}
	pki, err := c.writePKI()
	if err != nil {
		return nil, err
	}
	etcdClient, err := FreePort()
	if err != nil {
		return nil, err
	}
	etcdPeer, err := FreePort()
	if err != nil {
		return nil, err
	}
	apiPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := c.start("etcd", bins["etcd"], "--data-dir="+c.path("etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296"); err != nil {
		return nil, err
	}
	server := fmt.Sprintf("https://%s:%d", RealClusterNodeIP, apiPort)
	if err := c.start("kube-apiserver", bins["kube-apiserver"],
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=0.0.0.0", "--advertise-address="+RealClusterNodeIP,
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--service-cluster-ip-range="+RealClusterServiceCIDR,
		"--tls-cert-file="+pki["apiserver.crt"], "--tls-private-key-file="+pki["apiserver.key"],
		"--client-ca-file="+pki["ca.crt"],
		"--kubelet-client-certificate="+pki["apiserver-kubelet.crt"], "--kubelet-client-key="+pki["apiserver-kubelet.key"],
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc."+RealClusterDomain,
		"--service-account-key-file="+pki["sa.pub"], "--service-account-signing-key-file="+pki["sa.key"],
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--endpoint-reconciler-type=lease",
		"--v=1"); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfigs(server, pki); err != nil {
		return nil, err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return nil, err
	}
	admin := c.path("admin.kubeconfig")
	// The node's identity gets the node role (kubeadm binds it the same
	// way); the Node authorizer and NodeRestriction bound it further.
	if _, err := c.Kubectl(ctx, nil, "create", "clusterrolebinding", "ayatori-e2e:nodes",
		"--clusterrole=system:node", "--group=system:nodes"); err != nil {
		return nil, err
	}
	if err := c.start("kube-controller-manager", bins["kube-controller-manager"],
		"--kubeconfig="+admin, "--authentication-kubeconfig="+admin, "--authorization-kubeconfig="+admin,
		"--service-account-private-key-file="+pki["sa.key"], "--root-ca-file="+pki["ca.crt"],
		"--use-service-account-credentials=true", "--leader-elect=false", "--secure-port=0",
		"--controllers=*", "--allocate-node-cidrs=false", "--v=1"); err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", bins["kube-scheduler"],
		"--kubeconfig="+admin, "--authentication-kubeconfig="+admin, "--authorization-kubeconfig="+admin,
		"--leader-elect=false", "--secure-port=0", "--v=1"); err != nil {
		return nil, err
	}
	if err := c.startContainerd(bins["containerd"], runc, cniDir); err != nil {
		return nil, err
	}
	if err := c.startKubelet(bins["kubelet"], pki); err != nil {
		return nil, err
	}
	healthz, err := FreePort()
	if err != nil {
		return nil, err
	}
	metrics, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := c.start("kube-proxy", bins["kube-proxy"], "--kubeconfig="+c.path("kube-proxy.kubeconfig"),
		"--hostname-override="+RealClusterNodeName, "--cluster-cidr="+RealClusterPodCIDR, "--proxy-mode=iptables",
		fmt.Sprintf("--healthz-bind-address=127.0.0.1:%d", healthz),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
		"--conntrack-max-per-core=0", "--v=1"); err != nil {
		return nil, err
	}
	return c, c.waitNodeReady(ctx)
}

func (c *RealCluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// hostSetup gives lo the node address and lets bridged pod traffic pass
// through iptables (Service traffic between two pods of the bridge).
func (c *RealCluster) hostSetup() error {
	// A run killed before its Close left the bridge and its iptables
	// chains behind: the bridge of our pod network is ours to remove.
	if out, err := exec.Command("ip", "-4", "addr", "show", "dev", realClusterBridge).CombinedOutput(); err == nil &&
		strings.Contains(string(out), " 10.244.0.1/24") {
		_ = exec.Command("ip", "link", "delete", realClusterBridge).Run()
		removeChains(func(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") })
	}
	out, err := exec.Command("ip", "-4", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip addr show dev lo: %v: %s", err, out)
	}
	if !strings.Contains(string(out), " "+RealClusterNodeIP+"/32") {
		if out, err := exec.Command("ip", "addr", "add", RealClusterNodeIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
			return fmt.Errorf("ip addr add %s/32 dev lo: %v: %s", RealClusterNodeIP, err, out)
		}
		c.addedNodeIP = true
	}
	for path, value := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward":                 "1",
		"/proc/sys/net/bridge/bridge-nf-call-iptables":  "1",
		"/proc/sys/net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			if strings.Contains(path, "bridge") {
				_ = exec.Command("modprobe", "br_netfilter").Run()
				if err = os.WriteFile(path, []byte(value), 0o644); err == nil {
					continue
				}
			}
			return fmt.Errorf("set %s: %w", path, err)
		}
	}
	return nil
}

// writePKI makes the cluster CA, the apiserver's serving certificate, the
// client certificates (admin, kubelet, kube-proxy, the apiserver's kubelet
// client) and the ServiceAccount signing key. It returns file paths by name.
func (c *RealCluster) writePKI() (map[string]string, error) {
	dir := c.path("pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := bootstrap.NewCA("ayatori-e2e-cluster-ca", 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	write := func(name string, data []byte) error {
		p := filepath.Join(dir, name)
		files[name] = p
		return os.WriteFile(p, data, 0o600)
	}
	if err := write("ca.crt", ca.CertPEM); err != nil {
		return nil, err
	}
	c.CAFile = files["ca.crt"]
	serving, err := ca.Issue([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + RealClusterDomain, "localhost"},
		[]string{RealClusterAPIServerIP, RealClusterNodeIP, "127.0.0.1"}, 7*24*time.Hour, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	if err := write("apiserver.crt", serving.CertPEM); err != nil {
		return nil, err
	}
	if err := write("apiserver.key", serving.KeyPEM); err != nil {
		return nil, err
	}
	for name, subject := range map[string][2]string{
		"admin":             {"ayatori-e2e-admin", "system:masters"},
		"kubelet":           {"system:node:" + RealClusterNodeName, "system:nodes"},
		"kube-proxy":        {"system:kube-proxy", ""},
		"apiserver-kubelet": {"kube-apiserver-kubelet-client", "system:masters"},
	} {
		var orgs []string
		if subject[1] != "" {
			orgs = []string{subject[1]}
		}
		cert, err := ca.IssueClient(subject[0], orgs, 7*24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := write(name+".crt", cert.CertPEM); err != nil {
			return nil, err
		}
		if err := write(name+".key", cert.KeyPEM); err != nil {
			return nil, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return nil, err
	}
	return files, nil
}

func (c *RealCluster) writeKubeconfigs(server string, pki map[string]string) error {
	for _, name := range []string{"admin", "kubelet", "kube-proxy"} {
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, server, pki["ca.crt"], name, pki[name+".crt"], pki[name+".key"], name)
		if err := os.WriteFile(c.path(name+".kubeconfig"), []byte(kc), 0o600); err != nil {
			return err
		}
	}
	c.KubeconfigPath = c.path("admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	c.Config = cfg
	c.Scheme = runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		databasev1alpha1.AddToScheme, executionv1alpha1.AddToScheme} {
		if err := add(c.Scheme); err != nil {
			return err
		}
	}
	c.Client, err = client.New(cfg, client.Options{Scheme: c.Scheme})
	return err
}

func (c *RealCluster) waitAPIServer(ctx context.Context) error {
	return c.procs["kube-apiserver"].waitReady(90*time.Second, func() error {
		ns := &corev1.Namespace{}
		return c.Client.Get(ctx, client.ObjectKey{Name: "default"}, ns)
	})
}

func (c *RealCluster) startContainerd(bin, runc, cniBin string) error {
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	// A private CNI bin directory: the bridge's plugins and the loopback one.
	c.containerdSock = c.path("containerd.sock")
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins.'io.containerd.cri.v1.runtime']
  # This machine is a container without CAP_SYS_RESOURCE: containerd may
  # not give a container an OOM score below its own (runc fails with
  # "can't get final child's PID from pipe" otherwise).
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, c.path("containerd/root"), c.path("containerd/state"), c.containerdSock, runc, cniBin, c.path("cni/net.d"), RealClusterSandboxImage)
	if err := os.WriteFile(c.path("containerd.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "ayatori-e2e",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
`, realClusterBridge, RealClusterPodCIDR, c.path("cni/ipam"))
	if err := os.WriteFile(c.path("cni/net.d/10-ayatori-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	// The shim and ctr live next to containerd; runc and iptables on PATH.
	env := []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH")}
	if err := c.startEnv("containerd", bin, env, "--config="+c.path("containerd.toml")); err != nil {
		return err
	}
	return c.procs["containerd"].waitReady(60*time.Second, func() error {
		_, err := c.Ctr("version")
		return err
	})
}

// Ctr runs containerd's ctr against the node's containerd in the k8s.io
// namespace (the CRI's) and returns its combined output.
func (c *RealCluster) Ctr(args ...string) ([]byte, error) {
	return c.ctr(nil, args...)
}

func (c *RealCluster) ctr(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(ToolDir("containerd"), "ctr"),
		append([]string{"--address", c.containerdSock, "--namespace", "k8s.io"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// LoadImages copies images from the local Docker engine into the node's
// runtime (docker save | ctr images import), as `kind load docker-image`
// does. Pods must not use the tag latest or must set imagePullPolicy
// IfNotPresent: the node has no registry to pull from.
func (c *RealCluster) LoadImages(ctx context.Context, images ...string) error {
	save := exec.CommandContext(ctx, "docker", append([]string{"save"}, images...)...)
	imp := exec.CommandContext(ctx, filepath.Join(ToolDir("containerd"), "ctr"),
		"--address", c.containerdSock, "--namespace", "k8s.io", "images", "import", "-")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	var saveErr, impOut bytes.Buffer
	save.Stderr = &saveErr
	imp.Stdout, imp.Stderr = &impOut, &impOut
	if err := save.Start(); err != nil {
		return err
	}
	if err := imp.Run(); err != nil {
		_ = save.Wait()
		return fmt.Errorf("ctr images import: %v: %s %s", err, impOut.String(), saveErr.String())
	}
	if err := save.Wait(); err != nil {
		return fmt.Errorf("docker save %s: %v: %s", strings.Join(images, " "), err, saveErr.String())
	}
	return nil
}

func (c *RealCluster) startKubelet(bin string, pki map[string]string) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	for _, d := range []string{"kubelet", "pod-logs"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
# This machine mounts cgroup v1 (hybrid): kubelet >= 1.35 refuses it unless told.
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
clusterDNS: [%s]
clusterDomain: %s
podLogsDir: %q
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# The images are loaded, never pulled; keep them whatever the disk holds.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, RealClusterNodeIP, port, pki["ca.crt"], c.containerdSock, RealClusterDNSIP, RealClusterDomain, c.path("pod-logs"))
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return c.start("kubelet", bin, "--config="+c.path("kubelet.yaml"),
		"--kubeconfig="+c.path("kubelet.kubeconfig"), "--root-dir="+c.path("kubelet"),
		"--hostname-override="+RealClusterNodeName, "--node-ip="+RealClusterNodeIP, "--v=1")
}

func (c *RealCluster) waitNodeReady(ctx context.Context) error {
	return pollReady(120*time.Second, func() error {
		for _, name := range []string{"kubelet", "containerd", "kube-proxy"} {
			if c.procs[name].exited() {
				return fmt.Errorf("%s exited", name)
			}
		}
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: RealClusterNodeName}, n); err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("node %s not Ready", RealClusterNodeName)
		}
		return nil
	})
}

func (c *RealCluster) start(name, bin string, args ...string) error {
	return c.startEnv(name, bin, nil, args...)
}

func (c *RealCluster) startEnv(name, bin string, env []string, args ...string) error {
	logPath := c.path(name + ".log")
	c.LogPaths[name] = logPath
	p, err := startProcess(processSpec{name: name, path: bin, args: args, env: env, dir: c.Dir, logPath: logPath})
	if err != nil {
		return err
	}
	c.procs[name] = p
	c.order = append(c.order, name)
	return nil
}

// PID returns the process ID of one of the cluster's processes (0: none).
func (c *RealCluster) PID(name string) int { return c.procs[name].livePID() }

func (c *RealCluster) logTails(n int) string {
	var b strings.Builder
	for _, name := range c.order {
		fmt.Fprintf(&b, "\n--- %s (last %d lines) ---\n%s", name, n, fileTail(c.LogPaths[name], n))
	}
	return b.String()
}

// LogTails returns the last n lines of every process log.
func (c *RealCluster) LogTails(n int) string { return c.logTails(n) }

// Close stops the node and the control plane and removes what they left on
// the host: every container and sandbox (their shims are not our children),
// the kubelet's mounts, the pod bridge, kube-proxy's and the CNI plugins'
// iptables chains, the kubepods cgroups, /var/log/containers links into
// Dir, the node address on lo and Dir itself. Safe to call twice.
func (c *RealCluster) Close() {
	if c.unreg != nil {
		c.unreg()
		c.unreg = nil
	}
	// The kubelet first (it would restart what we remove), waiting for it
	// to exit; then every task and container through containerd.
	c.procs["kubelet"].stop(syscall.SIGTERM, 15*time.Second)
	if c.procs["containerd"].running() {
		c.removeContainers()
	}
	for i := len(c.order) - 1; i >= 0; i-- {
		c.procs[c.order[i]].stop(syscall.SIGTERM, 10*time.Second)
	}
	c.cleanHost()
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

func (c *RealCluster) removeContainers() {
	out, err := c.Ctr("tasks", "ls", "-q")
	if err == nil {
		for _, id := range strings.Fields(string(out)) {
			_, _ = c.Ctr("tasks", "kill", "--signal", "SIGKILL", id)
		}
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			out, err := c.Ctr("tasks", "ls", "-q")
			if err != nil || len(bytes.TrimSpace(out)) == 0 {
				break
			}
			for _, id := range strings.Fields(string(out)) {
				_, _ = c.Ctr("tasks", "delete", "--force", id)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if out, err := c.Ctr("containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_, _ = c.Ctr("containers", "delete", id)
		}
	}
}

func (c *RealCluster) cleanHost() {
	if c.Dir == "" {
		return
	}
	// Mounts under Dir (kubelet volumes, sandbox network namespaces,
	// containerd's snapshots), deepest first.
	if data, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && (f[1] == c.Dir || strings.HasPrefix(f[1], c.Dir+"/")) {
				mounts = append(mounts, f[1])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := syscall.Unmount(mounts[i], 0); err != nil {
				_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
			}
		}
	}
	_ = exec.Command("ip", "link", "delete", realClusterBridge).Run()
	if c.addedNodeIP {
		_ = exec.Command("ip", "addr", "del", RealClusterNodeIP+"/32", "dev", "lo").Run()
	}
	removeChains(func(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") })
	for _, controller := range []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd", "hugetlb", "unified"} {
		removeCgroupTree(filepath.Join("/sys/fs/cgroup", controller, "kubepods"))
	}
	if entries, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/var/log/containers", e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, c.Dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
}

// removeCgroupTree removes a cgroup directory and its children, deepest
// first (cgroup directories are removed with rmdir, never unlinked).
func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// removeChains deletes the iptables chains (filter, nat, mangle) that ours
// selects: first every rule of another chain that jumps into one of them
// (by rule number, last first), then their rules, then the chains.
func removeChains(ours func(chain string) bool) {
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			continue
		}
		var chains []string
		jumps := map[string][]int{} // chain -> rule numbers jumping into ours
		counts := map[string]int{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 0 && strings.HasPrefix(f[0], ":") && ours(f[0][1:]):
				chains = append(chains, f[0][1:])
			case len(f) > 1 && f[0] == "-A":
				counts[f[1]]++
				if ours(f[1]) {
					continue
				}
				for i := 2; i+1 < len(f); i++ {
					if (f[i] == "-j" || f[i] == "-g") && ours(f[i+1]) {
						jumps[f[1]] = append(jumps[f[1]], counts[f[1]])
					}
				}
			}
		}
		for chain, nums := range jumps {
			for i := len(nums) - 1; i >= 0; i-- {
				_ = exec.Command("iptables", "-t", table, "-D", chain, strconv.Itoa(nums[i])).Run()
			}
		}
		for _, ch := range chains {
			_ = exec.Command("iptables", "-t", table, "-F", ch).Run()
		}
		for _, ch := range chains {
			_ = exec.Command("iptables", "-t", table, "-X", ch).Run()
		}
	}
}

// Kubectl runs the pinned kubectl against the cluster and returns its
// combined output.
func (c *RealCluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	bin, err := ToolPath("kubectl")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}
