package execution

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Labels and annotations the adapters put on backend objects.
const (
	// LabelJobUID carries the Ayatori Job's UID on every backend object
	// (the idempotency key: a backend object is the Job's only if it
	// carries its UID).
	LabelJobUID = "execution.ayatori.ddupan.top/job-uid"
	// AnnotationJobName and AnnotationJobNamespace name the Ayatori Job
	// (annotations: a Job name may exceed a label value's 63 characters).
	AnnotationJobName      = "execution.ayatori.ddupan.top/job-name"
	AnnotationJobNamespace = "execution.ayatori.ddupan.top/job-namespace"
)

// NativeJobName is the name of the batch/v1 Job that runs the Ayatori Job
// with UID uid: "ayatori-" + the UID in lower case (44 characters for a
// Kubernetes UID; at most 63 for any UID the API server assigns, so it is a
// valid Job name and pod label value). Derived from the UID alone, so
// Ensure finds an execution it created before a crash, and a Job recreated
// under the same name never adopts the old one.
func NativeJobName(uid string) (string, error) {
	u := strings.ToLower(uid)
	if u == "" || len(u) > 55 {
		return "", fmt.Errorf("job UID %q can not name a native Job", uid)
	}
	for _, c := range u {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return "", fmt.Errorf("job UID %q can not name a native Job", uid)
		}
	}
	return "ayatori-" + strings.Trim(u, "-"), nil
}

// TaskDigest is "sha256:<hex>" of the canonical JSON of a task (the
// job.spec.task value; any JSON-marshallable form of it): the Ensure
// intent's fingerprint of what runs, without any literal value.
func TaskDigest(task any) (string, error) {
	b, err := json.Marshal(task)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
