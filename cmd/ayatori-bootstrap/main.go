// Command ayatori-bootstrap makes the trust material of one Ayatori
// installation, once, and writes it as Kubernetes objects for
// `kubectl apply` (docs/journal.md "Trust model", docs/database/deployment.md
// "Bootstrap"):
//
//	ayatori-bootstrap --out ./ayatori-secrets
//	kubectl apply -f ./ayatori-secrets/secrets.yaml
//	kubectl apply -k deploy/overlays/prod
//
// It writes the NATS servers' CA and certificate, the NKeys of the journal's
// two NATS identities, and the manager's journal signing key with the
// trusted public keys. --rotate-journal-key writes only a new signing key
// and a trusted-keys ConfigMap that also lists the keys of --trusted-keys
// (the ones in use), so records signed before stay verifiable.
//
// The output holds secrets: it is written with mode 0600 and never printed.
//
// `ayatori-bootstrap openbao` configures an OpenBao server once (with a
// token allowed to): Kubernetes auth against the cluster, the manager's
// policy and role, and the per-namespace reader policy and role ESO logs
// in with (deploy/openbao).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	bao "github.com/openbao/openbao/api/v2"

	openbaodeploy "git.ddupan.top/panxiao81/ayatori/deploy/openbao"
	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ayatori-bootstrap:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "openbao" {
		return runOpenBao(args[1:])
	}
	fs := flag.NewFlagSet("ayatori-bootstrap", flag.ContinueOnError)
	namespace := fs.String("namespace", "ayatori-system", "the controller namespace")
	out := fs.String("out", "", "directory to write secrets.yaml into (created; must not hold one)")
	dns := fs.String("nats-dns-names", "", "comma-separated extra DNS names of the NATS servers (besides the Services of deploy/)")
	rotate := fs.Bool("rotate-journal-key", false, "write only a new journal signing key and the trusted keys (with --trusted-keys)")
	trustedPath := fs.String("trusted-keys", "", "PEM public keys (a file or a directory) to keep trusting, e.g. the ConfigMap ayatori-journal-trusted-keys extracted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	if *rotate && *trustedPath == "" {
		return errors.New("--rotate-journal-key needs --trusted-keys (the keys in use), or records signed before would no longer verify")
	}
	var trusted *journal.TrustedKeys
	if *trustedPath != "" {
		t, err := journal.LoadTrustedKeys(*trustedPath)
		if err != nil {
			return err
		}
		trusted = t
	}
	signer, err := journal.NewSigningKey()
	if err != nil {
		return err
	}
	var nats *bootstrap.NATS
	if !*rotate {
		names := bootstrap.ClusterNames(*namespace)
		for _, n := range strings.Split(*dns, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if nats, err = bootstrap.NewNATS(names, nil, bootstrap.ServerValidity); err != nil {
			return err
		}
	}
	data, err := bootstrap.Manifests(*namespace, nats, signer, trusted)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	path := filepath.Join(*out, "secrets.yaml")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w (remove it first: its keys are in use if it was applied)", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s (journal signing key %s); apply it with kubectl apply -f %s, then keep it offline or delete it\n", path, signer.ID(), path)
	return nil
}

func runOpenBao(args []string) error {
	fs := flag.NewFlagSet("ayatori-bootstrap openbao", flag.ContinueOnError)
	address := fs.String("address", os.Getenv("BAO_ADDR"), "OpenBao address (env BAO_ADDR)")
	tokenFile := fs.String("token-file", "", "file holding a token that may configure auth, policies and roles")
	caFile := fs.String("ca-file", "", "PEM CA bundle that verifies OpenBao's certificate (default: the system roots)")
	s := openbaodeploy.Settings{}
	fs.StringVar(&s.KVMount, "kv-mount", "kv", "the KV v2 mount (the manager's --openbao-kv-mount)")
	fs.StringVar(&s.BasePath, "base-path", "postgresql-tenants", "the Tenants' base path (the manager's --openbao-tenant-base-path)")
	fs.StringVar(&s.AuthMount, "auth-mount", "kubernetes", "the Kubernetes auth mount (the manager's --openbao-auth-mount)")
	fs.StringVar(&s.KubernetesHost, "kubernetes-host", "", "the Kubernetes API server OpenBao sends TokenReviews to")
	k8sCA := fs.String("kubernetes-ca-file", "", "PEM CA of the Kubernetes API server")
	reviewer := fs.String("reviewer-jwt-file", "", "a ServiceAccount token allowed to create TokenReviews (system:auth-delegator)")
	fs.StringVar(&s.ManagerNamespace, "namespace", "ayatori-system", "the controller namespace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	read := func(name, path string) (string, error) {
		if path == "" {
			return "", fmt.Errorf("--%s is required", name)
		}
		b, err := os.ReadFile(path)
		return strings.TrimSpace(string(b)), err
	}
	token, err := read("token-file", *tokenFile)
	if err != nil {
		return err
	}
	if s.KubernetesCA, err = read("kubernetes-ca-file", *k8sCA); err != nil {
		return err
	}
	if s.ReviewerJWT, err = read("reviewer-jwt-file", *reviewer); err != nil {
		return err
	}
	if *address == "" || s.KubernetesHost == "" {
		return errors.New("--address and --kubernetes-host are required")
	}
	cfg := bao.DefaultConfig()
	cfg.Address = *address
	if *caFile != "" {
		if err := cfg.ConfigureTLS(&bao.TLSConfig{CACert: *caFile}); err != nil {
			return err
		}
	}
	c, err := bao.NewClient(cfg)
	if err != nil {
		return err
	}
	c.SetToken(token)
	if err := openbaodeploy.Apply(context.Background(), c, s); err != nil {
		return err
	}
	fmt.Printf("configured %s: Kubernetes auth at %s, roles %s and %s\n", *address, s.AuthMount, openbaodeploy.ManagerRole, openbaodeploy.ReaderRole)
	return nil
}
