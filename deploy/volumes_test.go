//go:build !unit

package deploy_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestMountedFilesReadableByTheContainer: a container running as non-root
// reads the Secret and ConfigMap files it mounts. A file mode without
// "other" read (defaultMode 0400, 0440) is readable by a non-root
// container only through its group: the pod must set fsGroup, which makes
// the kubelet give the files that group. (The manager's journal signing
// key was mounted 0400 root-owned for a container running as 65532 and
// the manager could not start: found by make e2e, issue 26.)
func TestMountedFilesReadableByTheContainer(t *testing.T) {
	for _, overlay := range []string{"overlays/dev", "overlays/prod", "overlays/e2e"} {
		for _, o := range render(t, overlay) {
			var spec *corev1.PodSpec
			switch o.GetKind() {
			case "Deployment":
				var d appsv1.Deployment
				if err := runtimeConvert(o, &d); err != nil {
					t.Fatal(err)
				}
				spec = &d.Spec.Template.Spec
			case "StatefulSet":
				var s appsv1.StatefulSet
				if err := runtimeConvert(o, &s); err != nil {
					t.Fatal(err)
				}
				spec = &s.Spec.Template.Spec
			default:
				continue
			}
			hasFSGroup := spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil
			for _, v := range spec.Volumes {
				var mode *int32
				switch {
				case v.Secret != nil:
					mode = v.Secret.DefaultMode
				case v.ConfigMap != nil:
					mode = v.ConfigMap.DefaultMode
				default:
					continue
				}
				if mode != nil && *mode&0o004 == 0 && !hasFSGroup {
					t.Errorf("%s: %s/%s mounts volume %s with mode %#o (not readable by others) and sets no fsGroup: a non-root container cannot read it",
						overlay, o.GetKind(), o.GetName(), v.Name, *mode)
				}
			}
		}
	}
}
