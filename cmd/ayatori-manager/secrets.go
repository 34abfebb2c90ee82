package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
)

// secretReader reads admin Secrets from the controller namespace only.
type secretReader struct {
	c         client.Reader
	namespace string
}

func (s secretReader) ReadSecret(ctx context.Context, name string) (map[string][]byte, string, error) {
	sec := &corev1.Secret{}
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", pgexec.ErrSecretNotFound
		}
		return nil, "", err
	}
	return sec.Data, sec.ResourceVersion, nil
}

// passwordSource adapts the OpenBao store to the PostgreSQL executor. The
// store's errors are already the domain's Failure (reason, safe message,
// no response body: executors/openbao/classify.go), and the PostgreSQL
// executor's Classify keeps a Failure as it is, so nothing is translated
// here.
type passwordSource struct{ s *baoexec.Store }

func (p passwordSource) TenantPassword(ctx context.Context, mount, path, instanceUID, tenantUID, namespace, name string) (string, error) {
	pw, _, err := p.s.Read(ctx, mount, path, baoexec.Owner{InstanceUID: instanceUID, TenantUID: tenantUID, Namespace: namespace, Name: name})
	return pw, err
}
