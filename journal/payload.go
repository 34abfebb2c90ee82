package journal

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// payloadKey identifies the payload of one operation of one domain and
// record type.
type payloadKey struct {
	domain, op string
	typ        RecordType
}

var (
	payloadMu    sync.RWMutex
	payloadTypes = map[payloadKey]reflect.Type{}
)

// forbiddenFieldWords are substrings that no payload field name or JSON
// name may contain unless the field is tagged `journal:"ref"`: a payload
// must have no field able to carry a secret value (a record may carry
// where a secret lives and its version, never the secret).
var forbiddenFieldWords = []string{"password", "passwd", "secret", "token", "credential", "privatekey", "apikey", "dsn", "connectionstring"}

// TagRef is the value of the struct tag `journal:"ref"`. It declares that a
// field whose name mentions a secret ("secretName", "credentialPath",
// "passwordKey") only ever holds a reference to one (a name, a key, a path,
// a version), never the value. Without the tag such a field is refused.
const TagRef = "ref"

// RegisterPayload declares the payload type of a domain's operation for
// intents, outcomes or notes (domain is the subject token, see Domain). It
// panics if the type has a field whose name suggests it could carry a
// secret and is not tagged `journal:"ref"` (see forbiddenFieldWords), a
// field of an unsupported kind (interface, map with non-string keys, func,
// chan), or when the same (domain, operation, type) is registered twice:
// payload types are closed, reviewed shapes with one owner. The same
// operation name in two domains is two registrations.
func RegisterPayload(domain, operation string, typ RecordType, sample any) {
	t := reflect.TypeOf(sample)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !domainPattern.MatchString(domain) {
		panic(fmt.Sprintf("journal: payload for %s %s: domain %q is not a subject token", operation, typ, domain))
	}
	if err := CheckPayloadType(t); err != nil {
		panic(fmt.Sprintf("journal: payload for %s/%s %s: %v", domain, operation, typ, err))
	}
	payloadMu.Lock()
	defer payloadMu.Unlock()
	k := payloadKey{domain, operation, typ}
	if old, ok := payloadTypes[k]; ok {
		panic(fmt.Sprintf("journal: payload for %s/%s %s registered twice (%v, %v)", domain, operation, typ, old, t))
	}
	payloadTypes[k] = t
}

// RegisteredPayloads lists "domain/operation/type -> Go type" for
// documentation and tests.
func RegisteredPayloads() []string {
	payloadMu.RLock()
	defer payloadMu.RUnlock()
	out := make([]string, 0, len(payloadTypes))
	for k, t := range payloadTypes {
		out = append(out, fmt.Sprintf("%s/%s/%s -> %v", k.domain, k.op, k.typ, t))
	}
	sort.Strings(out)
	return out
}

// checkPayloadType checks payload against the type registered for the
// record's domain, operation and type; an unregistered payload must still
// be a safe shape.
func checkPayloadType(r *Record, payload any) error {
	var want reflect.Type
	ok := false
	if domain, err := Domain(r.Object.Group); err == nil {
		payloadMu.RLock()
		want, ok = payloadTypes[payloadKey{domain, r.Operation, r.Type}]
		payloadMu.RUnlock()
	}
	got := reflect.TypeOf(payload)
	for got.Kind() == reflect.Pointer {
		got = got.Elem()
	}
	if !ok {
		return CheckPayloadType(got)
	}
	if got != want {
		return fmt.Errorf("journal: %s %s payload must be %v, got %v", r.Operation, r.Type, want, got)
	}
	return nil
}

// CheckPayloadType walks a payload type and reports the first field that
// could carry a secret value or has an open-ended kind.
func CheckPayloadType(t reflect.Type) error {
	return checkType(t, t.String(), map[reflect.Type]bool{})
}

func checkType(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			jsonName, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			ref := f.Tag.Get("journal") == TagRef
			for _, name := range []string{f.Name, jsonName} {
				if name == "" || ref {
					continue
				}
				lower := strings.ToLower(name)
				for _, w := range forbiddenFieldWords {
					if strings.Contains(lower, w) {
						return fmt.Errorf("field %s.%s could carry a secret (contains %q; tag it `journal:\"ref\"` if it only names one)", path, f.Name, w)
					}
				}
			}
			if err := checkType(f.Type, path+"."+f.Name, seen); err != nil {
				return err
			}
		}
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return checkType(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return fmt.Errorf("field %s: map keys must be strings", path)
		}
		return checkType(t.Elem(), path+"{}", seen)
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("field %s: kind %s is not allowed in a payload", path, t.Kind())
	}
	return nil
}
