package integration

import (
	"errors"
	"strings"
	"testing"
)

// auto picks containers only when the daemon answers and both images are
// named: a daemon alone (no registry, or images only built locally) leaves
// the suites local.
func TestChooseProvider(t *testing.T) {
	up := func() error { return nil }
	down := func() error { return errors.New("no socket") }
	none := func() ContainerImages {
		return ContainerImages{Postgres: upstreamPostgresImage, OpenBao: upstreamOpenBaoImage}
	}
	built := func() ContainerImages {
		return ContainerImages{Postgres: localPostgresImage, OpenBao: localOpenBaoPrefix + "1.13.2"}
	}
	named := func() ContainerImages {
		return ContainerImages{Postgres: localPostgresImage, OpenBao: localOpenBaoPrefix + "1.13.2", FromEnv: true}
	}
	for _, c := range []struct {
		env    string
		ping   func() error
		images func() ContainerImages
		want   Provider
		reason string
	}{
		{"", down, built, ProviderLocal, "no Docker daemon"},
		{"auto", up, none, ProviderLocal, "not both set"},
		{"", up, built, ProviderLocal, "not both set"},
		{"", up, named, ProviderTestcontainers, localPostgresImage},
		{"testcontainers", up, none, ProviderTestcontainers, upstreamPostgresImage},
		{"testcontainers", up, built, ProviderTestcontainers, localPostgresImage},
		{"local", up, built, ProviderLocal, "local"},
	} {
		got, reason, err := chooseProvider(c.env, c.ping, c.images)
		if err != nil || got != c.want || !strings.Contains(reason, c.reason) {
			t.Errorf("env %q: %s (%q, %v), want %s containing %q", c.env, got, reason, err, c.want, c.reason)
		}
	}
	if _, _, err := chooseProvider("docker", up, built); err == nil {
		t.Error("an unknown provider must be refused")
	}
}
