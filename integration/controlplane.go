package integration

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
)

// ControlPlaneOptions choose what the control plane serves.
type ControlPlaneOptions struct {
	// ExternalSecretsCRDs also installs External Secrets Operator's CRDs
	// (from the cached ESO build).
	ExternalSecretsCRDs bool
}

// ControlPlane is a real kube-apiserver + etcd started by controller-runtime
// envtest with the project's CRDs (deploy/crd/bases) installed. The
// apiserver serves on 127.0.0.1, or under the testcontainers provider on the
// host's address on Docker's default bridge (so containers reach it too).
type ControlPlane struct {
	// Config is an admin rest.Config (system:masters).
	Config *rest.Config
	// Client is a controller-runtime client with the project's and the
	// Kubernetes built-in types registered.
	Client client.Client
	// Scheme holds the registered types.
	Scheme *runtime.Scheme
	// KubeconfigPath is an admin kubeconfig file, for child processes and kubectl.
	KubeconfigPath string

	env   *envtest.Environment
	dir   string
	unreg func()
	managerKubeconfigOnce
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// NewControlPlane starts kube-apiserver and etcd and installs the CRDs.
func NewControlPlane(opts ControlPlaneOptions) (_ *ControlPlane, err error) {
	etcd, err := ToolPath("etcd")
	if err != nil {
		return nil, err
	}
	apiserver, err := ToolPath("kube-apiserver")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ayatori-cp-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir}
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()
	// envtest starts the binaries itself; wrap them with setpriv so they get
	// a parent-death signal and never outlive a killed test binary.
	if etcd, err = pdeathsigWrapper(dir, "etcd", etcd); err != nil {
		return nil, err
	}
	if apiserver, err = pdeathsigWrapper(dir, "kube-apiserver", apiserver); err != nil {
		return nil, err
	}
	cp.Scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	if err := databasev1alpha1.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	if err := executionv1alpha1.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	crdPaths := []string{filepath.Join(RepoRoot(), "deploy", "crd", "bases")}
	if opts.ExternalSecretsCRDs {
		crdPaths = append(crdPaths, filepath.Join(ToolDir("external-secrets"), "crds"))
	}
	cp.env = &envtest.Environment{
		Scheme:                cp.Scheme,
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
		// envtest's default, 20 s per component start, is short on a
		// 2-vCPU machine running several stacks (a CI run under load
		// average 18 failed to start an apiserver five times).
		ControlPlaneStartTimeout: 90 * time.Second,
	}
	// Ports from FreePort, not envtest's (the kernel's ephemeral range,
	// where an outgoing connection can take a port between its pick and
	// the server's bind: "control plane did not start").
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	// etcd's data and the apiserver's certificates in dir, not in
	// directories of envtest's own: a start that envtest tries again reuses
	// its first try's directory and then never removes it.
	for _, sub := range []string{"etcd", "apiserver"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	cp.env.ControlPlane.Etcd = &envtest.Etcd{Path: etcd, DataDir: filepath.Join(dir, "etcd"),
		URL: &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}}
	cp.env.ControlPlane.Etcd.Configure().Set("listen-peer-urls", "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])))
	cp.env.ControlPlane.APIServer = &envtest.APIServer{Path: apiserver, CertDir: filepath.Join(dir, "apiserver")}
	cp.env.ControlPlane.APIServer.SecureServing.Address = "127.0.0.1"
	cp.env.ControlPlane.APIServer.SecureServing.Port = strconv.Itoa(ports[2])
	if p, _, _ := SelectProvider(); p == ProviderTestcontainers {
		// Containers (OpenBao's TokenReview) must reach the apiserver: it
		// serves on the host's Docker bridge address, which its serving
		// certificate then names, instead of 127.0.0.1.
		gw, err := dockerBridgeGateway()
		if err != nil {
			return nil, fmt.Errorf("control plane for containers: %w", err)
		}
		port, err := FreePortOn(gw)
		if err != nil {
			return nil, fmt.Errorf("control plane for containers: %w", err)
		}
		cp.env.ControlPlane.APIServer.SecureServing.Address = gw
		cp.env.ControlPlane.APIServer.SecureServing.Port = strconv.Itoa(port)
	}
	cp.unreg = registerCleanup(cp.Close)
	if cp.Config, err = cp.env.Start(); err != nil {
		return nil, fmt.Errorf("control plane did not start: %w", err)
	}
	if cp.Client, err = client.New(cp.Config, client.Options{Scheme: cp.Scheme}); err != nil {
		return nil, err
	}
	user, err := cp.env.AddUser(envtest.User{Name: "ayatori-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	cp.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.KubeconfigPath, kc, 0o600); err != nil {
		return nil, err
	}
	return cp, nil
}

// Close stops the control plane and removes its files.
func (cp *ControlPlane) Close() {
	if cp.env != nil {
		// Also after a Start that failed part way: envtest's directories
		// and whatever server it started go with it.
		_ = cp.env.Stop()
		cp.Config = nil
	}
	if cp.unreg != nil {
		cp.unreg()
	}
	if cp.dir != "" {
		_ = os.RemoveAll(cp.dir)
	}
}

// pdeathsigWrapper writes dir/name, a script that execs bin under
// `setpriv --pdeathsig KILL` when setpriv exists; otherwise it returns bin.
func pdeathsigWrapper(dir, name, bin string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return bin, nil
	}
	wdir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(wdir, name)
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, bin)
	return p, os.WriteFile(p, []byte(script), 0o755)
}
