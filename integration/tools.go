package integration

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed tools/versions.env
var versionsEnv string

// Versions returns the pinned tool versions from integration/tools/versions.env
// (NAME_VERSION -> value).
func Versions() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(versionsEnv, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// ToolsCache is the directory holding <name>-<version>/ tool builds:
// $AYATORI_TOOLS_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/ayatori/tools.
func ToolsCache() string {
	if d := os.Getenv("AYATORI_TOOLS_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "ayatori", "tools")
}

// toolNames maps a tool name to its versions.env key.
var toolNames = map[string]string{
	"etcd":             "ETCD_VERSION",
	"kube-apiserver":   "KUBE_APISERVER_VERSION",
	"vault":            "VAULT_VERSION",
	"external-secrets": "EXTERNAL_SECRETS_VERSION",
	"controller-gen":   "CONTROLLER_TOOLS_VERSION",
	"nats-server":      "NATS_SERVER_VERSION",
	// The workload tests' cluster (see Workload).
	"kube-controller-manager": "KUBE_APISERVER_VERSION",
	"kube-scheduler":          "KUBE_APISERVER_VERSION",
	"kwok":                    "KWOK_VERSION",
	// The real cluster's node and kubectl (RealCluster, make e2e).
	"kubelet":     "KUBE_APISERVER_VERSION",
	"kube-proxy":  "KUBE_APISERVER_VERSION",
	"kubectl":     "KUBE_APISERVER_VERSION",
	"containerd":  "CONTAINERD_VERSION",
	"cni-plugins": "CNI_PLUGINS_VERSION",
	"coredns":     "COREDNS_VERSION",
	// The alert rule and dashboard tests (issue 27).
	"prometheus": "PROMETHEUS_VERSION",
	"promtool":   "PROMETHEUS_VERSION",
}

// ToolDir returns the cache directory of one pinned tool.
func ToolDir(name string) string {
	return filepath.Join(ToolsCache(), name+"-"+Versions()[toolNames[name]])
}

// ToolPath returns the path of a pinned tool binary, or an error telling the
// caller to run `make tools` when it has not been built yet.
func ToolPath(name string) (string, error) {
	if _, ok := toolNames[name]; !ok {
		return "", fmt.Errorf("unknown tool %q", name)
	}
	p := filepath.Join(ToolDir(name), name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not built (%s missing): run `make tools`", name, p)
	}
	return p, nil
}
