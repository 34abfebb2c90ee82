package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// profileAPIServer takes a CPU profile of the kube-apiserver cfg points at
// (its /debug/pprof/profile, on by default with --profiling) for d,
// writes it to dir/kube-apiserver.pprof and prints `go tool pprof -top`
// of it: where the API server's CPU goes while the Tenants are provisioned.
// The profile is taken while the run goes on; errors are printed, never
// fatal (the figures do not depend on it).
func profileAPIServer(ctx context.Context, cfg *rest.Config, d time.Duration, dir string) <-chan string {
	return takeProfile(ctx, "kube-apiserver", d, 40, func() (string, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return "", err
		}
		return fetchProfileFrom(ctx, hc, cfg.Host, d, filepath.Join(dir, "kube-apiserver.pprof"))
	})
}

// profileManager is profileAPIServer for the manager's
// --pprof-bind-address (base its http://127.0.0.1:PORT): the profile goes
// to dir/ayatori-manager.pprof.
func profileManager(ctx context.Context, base string, d time.Duration, dir string) <-chan string {
	return takeProfile(ctx, "manager", d, 50, func() (string, error) {
		return fetchProfileFrom(ctx, http.DefaultClient, base, d, filepath.Join(dir, "ayatori-manager.pprof"))
	})
}

// takeProfile runs fetch (which writes a CPU profile of d and returns its
// path) in the background and sends what `go tool pprof -top` says of it,
// by self time and then the cum top nodes cumulatively, or the error.
func takeProfile(ctx context.Context, what string, d time.Duration, cum int, fetch func() (string, error)) <-chan string {
	done := make(chan string, 1)
	go func() {
		path, err := fetch()
		if err != nil {
			done <- what + " CPU profile: " + err.Error()
			return
		}
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
		if err != nil {
			done <- fmt.Sprintf("%s CPU profile %s: go tool pprof: %v", what, path, err)
			return
		}
		byCum, _ := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", fmt.Sprintf("-nodecount=%d", cum), path).CombinedOutput()
		done <- fmt.Sprintf("%s CPU profile over the first %s (%s; by self time, then cumulative):\n%s\n%s", what, d, path, out, byCum)
	}()
	return done
}

// fetchProfileFrom takes a CPU profile of d from base's
// /debug/pprof/profile with hc and writes it to path.
func fetchProfileFrom(ctx context.Context, hc *http.Client, base string, d time.Duration, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(base, "/"), int(d.Seconds())), nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
