package integration

import (
	"context"
	"encoding/json"
	"errors"
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
// a ping and both images are named (AYATORI_TC_POSTGRES_IMAGE and
// AYATORI_TC_OPENBAO_IMAGE); else local: a daemon that `make images`
// started does not by itself move the README's `make test` into
// containers (CI runs each provider explicitly; docs/testing.md
// "Providers"). The choice and its reason are returned for printing.
func SelectProvider() (Provider, string, error) {
	providerOnce.Do(func() {
		providerChoice, providerReason, providerErr = chooseProvider(os.Getenv("AYATORI_TEST_PROVIDER"), pingDocker, containerImages)
	})
	return providerChoice, providerReason, providerErr
}

// chooseProvider is SelectProvider's decision: env is AYATORI_TEST_PROVIDER,
// ping asks the Docker daemon, images resolves the provider's images.
func chooseProvider(env string, ping func() error, images func() ContainerImages) (Provider, string, error) {
	switch v := strings.TrimSpace(env); v {
	case "", "auto":
		if err := ping(); err != nil {
			return ProviderLocal, fmt.Sprintf("auto: no Docker daemon (%v)", err), nil
		}
		im := images()
		if !im.FromEnv {
			return ProviderLocal, "auto: a Docker daemon answered, but AYATORI_TC_POSTGRES_IMAGE and AYATORI_TC_OPENBAO_IMAGE are not both set (AYATORI_TEST_PROVIDER=testcontainers uses the images of `make images`, else the upstream ones)", nil
		}
		return ProviderTestcontainers, fmt.Sprintf("auto: a Docker daemon answered; images %s, %s", im.Postgres, im.OpenBao), nil
	case string(ProviderLocal):
		return ProviderLocal, "AYATORI_TEST_PROVIDER=local", nil
	case string(ProviderTestcontainers):
		im := images()
		return ProviderTestcontainers, fmt.Sprintf("AYATORI_TEST_PROVIDER=testcontainers; images %s, %s", im.Postgres, im.OpenBao), nil
	default:
		return "", "", fmt.Errorf("AYATORI_TEST_PROVIDER=%q: want local, testcontainers or auto", v)
	}
}

// Images of the testcontainers provider.
const (
	upstreamPostgresImage = "docker.io/library/postgres:15.18-bookworm"
	upstreamOpenBaoImage  = "quay.io/openbao/openbao:2.4.1"
	localPostgresImage    = "ayatori-test/postgres:15"
	localOpenBaoPrefix    = "ayatori-test/openbao:"   // + the pinned VAULT_VERSION without "v"
	upstreamNATSPrefix    = "docker.io/library/nats:" // + the pinned NATS_SERVER_VERSION without "v"
	localNATSPrefix       = "ayatori-test/nats:"
)

// ContainerImages are the images the testcontainers provider runs.
type ContainerImages struct {
	Postgres, OpenBao string
	// NATS runs the single JetStream server of NewNATS
	// (AYATORI_TC_NATS_IMAGE, else ayatori-test/nats:<pinned version> when
	// built, else upstream nats:<pinned version>).
	NATS string
	// FromEnv: both were named by AYATORI_TC_*_IMAGE.
	FromEnv bool
}

var (
	imagesOnce sync.Once
	images     ContainerImages
)

// containerImages resolves each image: AYATORI_TC_POSTGRES_IMAGE /
// AYATORI_TC_OPENBAO_IMAGE when set, else the image `make images` built when
// the Docker daemon has it, else the upstream image (pulled on first use).
func containerImages() ContainerImages {
	imagesOnce.Do(func() {
		pick := func(env, local, upstream string) (string, bool) {
			if v := os.Getenv(env); v != "" {
				return v, true
			}
			if imageExists(local) {
				return local, false
			}
			return upstream, false
		}
		var envPG, envBao bool
		images.Postgres, envPG = pick("AYATORI_TC_POSTGRES_IMAGE", localPostgresImage, upstreamPostgresImage)
		images.OpenBao, envBao = pick("AYATORI_TC_OPENBAO_IMAGE", localOpenBaoPrefix+strings.TrimPrefix(Versions()["VAULT_VERSION"], "v"), upstreamOpenBaoImage)
		images.FromEnv = envPG && envBao
		natsVersion := strings.TrimPrefix(Versions()["NATS_SERVER_VERSION"], "v")
		images.NATS, _ = pick("AYATORI_TC_NATS_IMAGE", localNATSPrefix+natsVersion, upstreamNATSPrefix+natsVersion)
	})
	return images
}

// dockerAPI is an HTTP client and base URL of the Docker daemon at
// DOCKER_HOST (unix or tcp) or /var/run/docker.sock, with a 2 s timeout
// per request (reads and pings).
func dockerAPI() (*http.Client, string, error) { return dockerAPIWithTimeout(2 * time.Second) }

// dockerAPIWithTimeout is dockerAPI with another request timeout (removing
// a running container kills it first: seconds on a loaded machine).
func dockerAPIWithTimeout(timeout time.Duration) (*http.Client, string, error) {
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
		return nil, "", fmt.Errorf("unsupported DOCKER_HOST %q", host)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial}}, base, nil
}

// pingDocker sends GET /_ping to the Docker daemon.
func pingDocker() error {
	c, base, err := dockerAPI()
	if err != nil {
		return err
	}
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

// dockerBridgeGateway is the host's address on Docker's default bridge
// network (e.g. 172.17.0.1): the address a container on that network
// reaches the host at.
func dockerBridgeGateway() (string, error) {
	c, base, err := dockerAPI()
	if err != nil {
		return "", err
	}
	resp, err := c.Get(base + "/networks/bridge")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("docker network inspect bridge: HTTP %d", resp.StatusCode)
	}
	var nw struct {
		IPAM struct {
			Config []struct{ Gateway, Subnet string }
		}
		Options map[string]string
	}
	if err := json.NewDecoder(resp.Body).Decode(&nw); err != nil {
		return "", fmt.Errorf("docker network inspect bridge: %w", err)
	}
	for _, c := range nw.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			return ip.String(), nil
		}
	}
	// A freshly started dockerd may report the bridge's subnet without its
	// gateway: the gateway is then the bridge interface's own address.
	name := nw.Options["com.docker.network.bridge.name"]
	if name == "" {
		name = "docker0"
	}
	if ifc, err := net.InterfaceByName(name); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				for _, c := range nw.IPAM.Config {
					if _, subnet, err := net.ParseCIDR(c.Subnet); err == nil && subnet.Contains(ipn.IP) {
						return ipn.IP.String(), nil
					}
				}
			}
		}
	}
	return "", errors.New("docker network inspect bridge: no IPv4 gateway")
}

// imageExists reports whether the Docker daemon has image name locally.
func imageExists(name string) bool {
	c, base, err := dockerAPI()
	if err != nil {
		return false
	}
	resp, err := c.Get(base + "/images/" + name + "/json")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
