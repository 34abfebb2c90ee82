//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// cluster is the one real cluster every test of the suite runs against.
var cluster *integration.RealCluster

// nodeImages are the images make images builds, loaded into the node's
// containerd (none is pulled: the node has no registry).
func nodeImages() []string {
	v := integration.Versions()
	return []string{
		"ayatori-test/pause:e2e",
		"ayatori-test/debian:bookworm",
		"ayatori-test/coredns:" + strings.TrimPrefix(v["COREDNS_VERSION"], "v"),
		"ayatori-test/postgres:15",
		"ayatori-test/openbao:" + strings.TrimPrefix(v["VAULT_VERSION"], "v"),
		"ayatori-test/nats:" + strings.TrimPrefix(v["NATS_SERVER_VERSION"], "v"),
		"ayatori-test/external-secrets:" + strings.TrimPrefix(v["EXTERNAL_SECRETS_VERSION"], "v"),
		managerImage,
	}
}

// managerImage is the product image as the e2e overlay names it
// (make images builds ayatori-manager:latest; TestMain tags it).
const managerImage = "ayatori-manager:e2e"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	step := func(name string, start time.Time) {
		fmt.Printf("e2e: %s in %s\n", name, time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	dir, err := os.MkdirTemp("/var/tmp", "ayatori-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = integration.NewRealCluster(ctx, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the cluster did not start: %v\n", err)
		return 1
	}
	defer cluster.Close()
	step("cluster with a Ready node", start)
	t0 := time.Now()
	if err := tagAndLoad(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	step("images loaded into the node", t0)
	t0 = time.Now()
	if err := deployDNS(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cluster DNS: %v\n%s", err, cluster.LogTails(30))
		return 1
	}
	step("cluster DNS", t0)
	if err := installAyatori(ctx, func(f string, a ...any) { fmt.Printf("e2e: "+f+"\n", a...) }); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: install: %v\n%s", err, cluster.LogTails(30))
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, cluster.LogTails(40))
		return code
	}
	t0 = time.Now()
	if err := uninstall(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: uninstall: %v\n", err)
		return 1
	}
	step("uninstalled: nothing Ayatori made is left", t0)
	return code
}

func tagAndLoad(ctx context.Context) error {
	if out, err := runCmd(ctx, "docker", "tag", "ayatori-manager:latest", managerImage); err != nil {
		return fmt.Errorf("docker tag: %v: %s (run make images)", err, out)
	}
	return cluster.LoadImages(ctx, nodeImages()...)
}

func deployDNS(ctx context.Context) error {
	manifest, err := os.ReadFile("testdata/coredns.yaml")
	if err != nil {
		return err
	}
	tag := strings.TrimPrefix(integration.Versions()["COREDNS_VERSION"], "v")
	manifest = []byte(strings.ReplaceAll(string(manifest), "COREDNS_TAG", tag))
	if _, err := cluster.Kubectl(ctx, manifest, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	_, err = cluster.Kubectl(ctx, nil, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")
	return err
}
