//go:build !unit

// Real servers only (no test runs under -short): left out of the unit
// loop's build (make test-unit: -tags unit), which then links no binary
// that would run nothing.

package deploy_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func o2meta(u *unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: u.GetName(), Labels: u.GetLabels()}
}

func runtimeConvert(u *unstructured.Unstructured, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}
