package database_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestManagerImageProvisionsATenant runs the product image (`make images`
// builds it from the repository's Dockerfile) as the manager of a local
// stack, under the constraints deploy/manager/deployment.yaml sets (user
// 65532, read-only root filesystem, no capabilities, no privilege
// escalation), and provisions a Tenant to Ready through it: the image's
// binaries, user and filesystem are what the manifests assume. Needs
// Docker: it runs under AYATORI_TEST_PROVIDER=testcontainers (make
// test-containers).
func TestManagerImageProvisionsATenant(t *testing.T) {
	if p := integration.Servers(t); p != integration.ProviderTestcontainers {
		t.Skip("runs the product image in Docker: AYATORI_TEST_PROVIDER=testcontainers (make test-containers)")
	}
	image := integration.ManagerImage()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := integration.StartStack(ctx, integration.StackOptions{NoWorkload: true, NoManager: true, Log: t.Logf,
		ManagerArgs: []string{"--retry-base=300ms", "--retry-max=3s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.StartManagerContainer(ctx, image)
	if err != nil {
		t.Fatalf("%v\n(build the image with `make images`)", err)
	}
	defer m.Close()
	defer func() {
		if t.Failed() {
			t.Logf("manager container log tail:\n%s", m.LogTail(40))
		}
	}()

	in, err := m.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.User != integration.ManagerImageUser || !in.HostConfig.ReadonlyRootfs {
		t.Fatalf("container user %q, read-only root %v", in.Config.User, in.HostConfig.ReadonlyRootfs)
	}
	// The manager process itself runs as 65532, whatever the image's USER.
	status, err := os.ReadFile("/proc/" + strconv.Itoa(in.State.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "Uid:") && strings.Fields(l)[1] != "65532" {
			t.Fatalf("manager process %s", l)
		}
	}

	if err := applyInstance(s); err != nil {
		t.Fatalf("Instance never Ready through the image: %v", err)
	}
	newTenant(t, s, "imaged", "app", nil)
	tn := waitTenant(t, s, "imaged", "app", metav1.ConditionTrue, "Ready", 2*time.Minute)
	if tn.Status.Credential.SecretRef.Name == "" {
		t.Fatalf("status %+v", tn.Status)
	}
	// A read-only root filesystem the manager never needed: it is still up.
	if in, err = m.Inspect(ctx); err != nil || !in.State.Running {
		t.Fatalf("manager container not running after provisioning: %v %+v", err, in.State)
	}
}
