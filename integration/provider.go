package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Provider says where the harness runs its servers.
type Provider string

// Providers. Local starts processes on this machine (the only one that works
// without a Docker engine); Testcontainers runs PostgreSQL and OpenBao in
// containers through testcontainers-go (integration/testcontainers).
const (
	ProviderLocal          Provider = "local"
	ProviderTestcontainers Provider = "testcontainers"
)

var (
	providerOnce   sync.Once
	providerChoice Provider
	providerReason string
	providerErr    error
)

// SelectProvider reads AYATORI_TEST_PROVIDER (local | testcontainers | auto;
// default auto). auto picks testcontainers only when a Docker daemon answers
// a ping, else local. The choice and its reason are returned for printing.
func SelectProvider() (Provider, string, error) {
	providerOnce.Do(func() {
		v := strings.TrimSpace(os.Getenv("AYATORI_TEST_PROVIDER"))
		switch v {
		case "", "auto":
			if err := pingDocker(); err == nil {
				providerChoice, providerReason = ProviderTestcontainers, "auto: a Docker daemon answered"
			} else {
				providerChoice, providerReason = ProviderLocal, fmt.Sprintf("auto: no Docker daemon (%v)", err)
			}
		case string(ProviderLocal):
			providerChoice, providerReason = ProviderLocal, "AYATORI_TEST_PROVIDER=local"
		case string(ProviderTestcontainers):
			providerChoice, providerReason = ProviderTestcontainers, "AYATORI_TEST_PROVIDER=testcontainers"
		default:
			providerErr = fmt.Errorf("AYATORI_TEST_PROVIDER=%q: want local, testcontainers or auto", v)
		}
	})
	return providerChoice, providerReason, providerErr
}

// pingDocker sends GET /_ping to the Docker daemon at DOCKER_HOST (unix or
// tcp) or /var/run/docker.sock.
func pingDocker() error {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	var dial func(ctx context.Context, _, _ string) (net.Conn, error)
	base := "http://docker"
	switch {
	case strings.HasPrefix(host, "unix://"):
		path := strings.TrimPrefix(host, "unix://")
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
	case strings.HasPrefix(host, "tcp://"):
		base = "http://" + strings.TrimPrefix(host, "tcp://")
	default:
		return fmt.Errorf("unsupported DOCKER_HOST %q", host)
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial}}
	resp, err := c.Get(base + "/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("docker ping: HTTP %d", resp.StatusCode)
	}
	return nil
}
