//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"os/exec"
)

func runCmd(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

var x509ServerAuth = x509.ExtKeyUsageServerAuth
