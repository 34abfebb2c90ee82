// Package nats holds the NATS server configuration Ayatori ships
// (nats.conf, nats-cluster.conf, auth.conf in this directory) and renders
// it for servers that run outside a cluster: the local stack, `make demo`
// and the test harness run exactly these files, with only their addresses,
// ports, paths and public keys put in place (Render). deploy/ mounts the
// same files from a ConfigMap; there the server reads the public keys from
// its environment.
package nats

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

var (
	//go:embed nats.conf
	singleConf string
	//go:embed nats-cluster.conf
	clusterConf string
	//go:embed auth.conf
	authConf string
)

// Files returns the shipped configuration files by name (nats.conf,
// nats-cluster.conf, auth.conf), as deploy/ mounts them.
func Files() map[string]string {
	return map[string]string{"nats.conf": singleConf, "nats-cluster.conf": clusterConf, "auth.conf": authConf}
}

// Settings are what differs between a server in deploy/ and one on this
// machine. Every field is required except the cluster ones (Cluster
// false) and NoSyncAlways.
type Settings struct {
	// ServerName is the server_name (JetStream knows peers by it).
	ServerName string
	// Client and Monitor are host:port listen addresses.
	Client, Monitor string
	// TLSDir holds tls.crt, tls.key (the server's certificate and key,
	// also its client certificate on routes) and ca.crt (the CA that
	// issued every NATS server certificate).
	TLSDir string
	// StoreDir is the JetStream store directory.
	StoreDir string
	// ManagerNKey and ReaderNKey are the public NKeys of the two
	// identities (auth.conf).
	ManagerNKey, ReaderNKey string
	// Cluster selects nats-cluster.conf, listening for routes on
	// ClusterListen and dialling Routes (nats://host:port URLs).
	Cluster       bool
	ClusterListen string
	Routes        []string
	// NoSyncAlways drops sync_interval: always (benchmarks that bulk-load
	// a store only; never for tests of durability).
	NoSyncAlways bool
}

// Render writes nats.conf (the single-server or the cluster file, as
// s.Cluster says) and auth.conf into dir and returns the path of nats.conf.
// Each value replaces exactly the text deploy/ has in its place; a shipped
// file that no longer has that text is an error, so a change of the
// shipped files can not leave a harness running something else.
func Render(dir string, s Settings) (string, error) {
	main := singleConf
	if s.Cluster {
		main = clusterConf
	}
	tlsDir := filepath.ToSlash(s.TLSDir)
	repl := []struct{ old, new string }{
		{"server_name: $SERVER_NAME", "server_name: " + quote(s.ServerName)},
		{`listen: "0.0.0.0:4222"`, "listen: " + quote(s.Client)},
		{`http: "0.0.0.0:8222"`, "http: " + quote(s.Monitor)},
		{`"/etc/nats/tls/tls.crt"`, quote(tlsDir + "/tls.crt")},
		{`"/etc/nats/tls/tls.key"`, quote(tlsDir + "/tls.key")},
		{`"/etc/nats/tls/ca.crt"`, quote(tlsDir + "/ca.crt")},
		{`store_dir: "/data/jetstream"`, "store_dir: " + quote(s.StoreDir)},
	}
	if s.NoSyncAlways {
		repl = append(repl, struct{ old, new string }{"sync_interval: always", ""})
	}
	if s.Cluster {
		routes := make([]string, len(s.Routes))
		for i, r := range s.Routes {
			routes[i] = quote(r)
		}
		repl = append(repl,
			struct{ old, new string }{`listen: "0.0.0.0:6222"`, "listen: " + quote(s.ClusterListen)},
			struct{ old, new string }{shippedRoutes, "routes: [\n    " + strings.Join(routes, "\n    ") + "\n  ]"})
	}
	for _, r := range repl {
		if !strings.Contains(main, r.old) {
			return "", fmt.Errorf("deploy/nats: the shipped configuration has no %q to replace", r.old)
		}
		main = strings.ReplaceAll(main, r.old, r.new)
	}
	auth := authConf
	for _, v := range []struct{ name, key string }{{"$AYATORI_NATS_MANAGER_NKEY", s.ManagerNKey}, {"$AYATORI_NATS_READER_NKEY", s.ReaderNKey}} {
		if !strings.Contains(auth, v.name) {
			return "", fmt.Errorf("deploy/nats: auth.conf has no %s", v.name)
		}
		if v.key == "" {
			return "", fmt.Errorf("deploy/nats: no public key for %s", v.name)
		}
		auth = strings.ReplaceAll(auth, v.name, quote(v.key))
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(auth), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "nats.conf")
	return path, os.WriteFile(path, []byte(main), 0o600)
}

// shippedRoutes is the routes block of nats-cluster.conf.
const shippedRoutes = `routes: [
    "nats://ayatori-nats-0.ayatori-nats-headless:6222"
    "nats://ayatori-nats-1.ayatori-nats-headless:6222"
    "nats://ayatori-nats-2.ayatori-nats-headless:6222"
  ]`

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
