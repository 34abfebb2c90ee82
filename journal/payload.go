package journal

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// payloadKey identifies the payload of one operation and record type.
type payloadKey struct {
	op  string
	typ RecordType
}

var (
	payloadMu    sync.RWMutex
	payloadTypes = map[payloadKey]reflect.Type{}
)

// forbiddenFieldWords are substrings that no payload field name or JSON
// name may contain: a payload must have no field able to carry a secret
// value. A password lives only in OpenBao; a payload may carry a KV path
// and version instead.
var forbiddenFieldWords = []string{"password", "passwd", "secret", "token", "credential", "privatekey", "apikey", "dsn", "connectionstring"}

// allowedFieldNames lists exact field names that contain a forbidden word
// but only ever hold a reference (a path, a name, a version), never a value.
var allowedFieldNames = map[string]bool{
	"SecretName": true, "secretName": true,
	"SecretRef": true, "secretRef": true,
	"CredentialRef": true, "credentialRef": true,
	"AdminCredRef": true, "adminCredentialRef": true,
	"PasswordKey": true, "passwordKey": true,
	"SecretResourceVersion": true, "secretResourceVersion": true,
	"CredentialMount": true, "credentialMount": true,
	"CredentialPath": true, "credentialPath": true,
	"TargetSecretName": true, "targetSecretName": true,
	"ExternalSecret": true, "externalSecret": true,
	"CredentialVersion": true, "credentialVersion": true,
	"SecretStoreName": true, "secretStoreName": true,
}

// RegisterPayload declares the payload type of an operation's intents or
// outcomes. It panics if the type has a field whose name suggests it could
// carry a secret (see forbiddenFieldWords) or a field of an unsupported
// kind (interface, map with non-string keys, func, chan): payload types are
// closed, reviewed shapes. Registering the same key twice with another type
// panics too.
func RegisterPayload(operation string, typ RecordType, sample any) {
	t := reflect.TypeOf(sample)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if err := CheckPayloadType(t); err != nil {
		panic(fmt.Sprintf("journal: payload for %s %s: %v", operation, typ, err))
	}
	payloadMu.Lock()
	defer payloadMu.Unlock()
	k := payloadKey{operation, typ}
	if old, ok := payloadTypes[k]; ok && old != t {
		panic(fmt.Sprintf("journal: payload for %s %s registered twice (%v, %v)", operation, typ, old, t))
	}
	payloadTypes[k] = t
}

// RegisteredPayloads lists "operation/type -> Go type" for documentation and tests.
func RegisteredPayloads() []string {
	payloadMu.RLock()
	defer payloadMu.RUnlock()
	out := make([]string, 0, len(payloadTypes))
	for k, t := range payloadTypes {
		out = append(out, fmt.Sprintf("%s/%s -> %v", k.op, k.typ, t))
	}
	sort.Strings(out)
	return out
}

func checkPayloadType(op string, typ RecordType, payload any) error {
	payloadMu.RLock()
	want, ok := payloadTypes[payloadKey{op, typ}]
	payloadMu.RUnlock()
	if !ok {
		// Unregistered payloads still must be safe shapes.
		t := reflect.TypeOf(payload)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		return CheckPayloadType(t)
	}
	got := reflect.TypeOf(payload)
	for got.Kind() == reflect.Pointer {
		got = got.Elem()
	}
	if got != want {
		return fmt.Errorf("journal: %s %s payload must be %v, got %v", op, typ, want, got)
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
			for _, name := range []string{f.Name, jsonName} {
				if name == "" || allowedFieldNames[name] {
					continue
				}
				lower := strings.ToLower(name)
				for _, w := range forbiddenFieldWords {
					if strings.Contains(lower, w) {
						return fmt.Errorf("field %s.%s could carry a secret (contains %q)", path, f.Name, w)
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
