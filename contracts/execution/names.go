package execution

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
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

// TaskDigest is "sha256v2:<hex>", the SHA-256 of the canonical JSON of a
// Job's task (job.spec.task) with every literal env value replaced by a
// marker: the Ensure intent's fingerprint of what runs. The journal may be
// read by the forensics identity, so it carries no hash of a literal value
// (which a short secret could be guessed from); the task is immutable, and
// the executor builds what runs from the live Job, so the values need no
// fingerprint.
func TaskDigest(task executionv1alpha1.TaskSpec) (string, error) {
	t := *task.DeepCopy()
	for i := range t.Env {
		if t.Env[i].Value != nil {
			marker := "<literal>"
			t.Env[i].Value = &marker
		}
	}
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return taskDigestV2 + hex.EncodeToString(sum[:]), nil
}

const (
	taskDigestV2 = "sha256v2:"
	// taskDigestV1 is the fingerprint of earlier versions (literal values
	// included), still accepted for intents they decided.
	taskDigestV1 = "sha256:"
)

// TaskMatches reports whether digest is task's fingerprint: a TaskDigest,
// or one of the earlier form (the whole task, for intents decided before).
func TaskMatches(task executionv1alpha1.TaskSpec, digest string) bool {
	if strings.HasPrefix(digest, taskDigestV1) {
		b, err := json.Marshal(task)
		sum := sha256.Sum256(b)
		return err == nil && digest == taskDigestV1+hex.EncodeToString(sum[:])
	}
	d, err := TaskDigest(task)
	return err == nil && d == digest
}
