package openbao

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"

	bao "github.com/openbao/openbao/api/v2"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Operations executed here.
const (
	// OpWriteCredential generates the Tenant's password once and writes the
	// seven keys to KV v2 with cas=0 and ownership custom_metadata; an
	// existing record of the same Tenant is reused (never a second password).
	OpWriteCredential = journal.OperationWriteCredential
	// OpDestroyCredential destroys the record with all versions and metadata
	// after proving ownership, then reads back that it is gone.
	OpDestroyCredential = "DestroyCredential"
)

// Ownership metadata keys written into custom_metadata.
const (
	MetaInstanceUID = "ayatori.ddupan.top/instance-uid"
	MetaTenantUID   = "ayatori.ddupan.top/tenant-uid"
	MetaTenant      = "ayatori.ddupan.top/tenant"
)

// CredentialIntent is the payload of WriteCredential / DestroyCredential
// intents. It names where the credential lives and what it describes; it
// has no field for the password.
type CredentialIntent struct {
	Mount       string `json:"mount"`
	Path        string `json:"path"`
	InstanceUID string `json:"instanceUID"`
	Username    string `json:"username"`
	Database    string `json:"database"`
	Host        string `json:"host"`
	HostAddr    string `json:"hostaddr"`
	Port        int32  `json:"port"`
	SSLMode     string `json:"sslmode"`
}

// CredentialOutcome is the payload of a WriteCredential outcome: the KV path
// and version, and whether this write generated the password.
type CredentialOutcome struct {
	Path    string `json:"path"`
	Version int    `json:"version"`
	Created bool   `json:"created"`
}

func init() {
	journal.RegisterPayload(OpWriteCredential, journal.TypeIntent, CredentialIntent{})
	journal.RegisterPayload(OpDestroyCredential, journal.TypeIntent, CredentialIntent{})
	journal.RegisterPayload(OpWriteCredential, journal.TypeOutcome, CredentialOutcome{})
}

// Failure reasons (Tenant Ready reasons).
const (
	ReasonConflict              = "Conflict"
	ReasonDependencyUnavailable = "DependencyUnavailable"
	ReasonInvalidSpec           = "InvalidSpec"
)

// Failure is a classified, secret-free error.
type Failure struct {
	Reason  string
	Message string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// Store writes and reads Tenant credentials.
type Store struct {
	Client *Client
}

// Owner identifies the Tenant a record belongs to.
type Owner struct {
	InstanceUID, TenantUID, Namespace, Name string
}

func (o Owner) metadata() map[string]string {
	return map[string]string{MetaInstanceUID: o.InstanceUID, MetaTenantUID: o.TenantUID, MetaTenant: o.Namespace + "/" + o.Name}
}

// owns reports whether metadata proves the record is this Tenant's.
func (o Owner) owns(md map[string]any) bool {
	return md[MetaTenantUID] == o.TenantUID && md[MetaInstanceUID] == o.InstanceUID
}

func notFound(err error) bool {
	var re *bao.ResponseError
	return errors.Is(err, bao.ErrSecretNotFound) || (errors.As(err, &re) && re.StatusCode == http.StatusNotFound)
}

// classify maps client errors to reasons without any response body.
func classify(err error, what string) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	var re *bao.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusForbidden, http.StatusUnauthorized:
			return &Failure{Reason: ReasonDependencyUnavailable, Message: fmt.Sprintf("OpenBao denied %s (HTTP %d): check the controller policy", what, re.StatusCode)}
		default:
			return &Failure{Reason: ReasonDependencyUnavailable, Message: fmt.Sprintf("OpenBao %s failed (HTTP %d)", what, re.StatusCode)}
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &Failure{Reason: ReasonDependencyUnavailable, Message: "OpenBao is unreachable (" + what + ")"}
	}
	return &Failure{Reason: ReasonDependencyUnavailable, Message: "OpenBao " + what + " failed"}
}

// GeneratePassword returns 32 characters from [A-Za-z0-9] drawn with
// crypto/rand (about 190 bits), safe in URIs and configuration files.
func GeneratePassword() (string, error) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 32)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[n.Int64()]
	}
	return string(b), nil
}

// Write ensures the credential record exists and belongs to owner:
//   - metadata exists with this owner and a version: reuse it (Created=false);
//   - metadata exists with another owner (or none): Conflict, nothing written;
//   - otherwise write the ownership metadata, then the data with cas=0, so a
//     concurrent writer can never replace it; the password is generated here.
func (s *Store) Write(ctx context.Context, in CredentialIntent, owner Owner) (CredentialOutcome, error) {
	out := CredentialOutcome{Path: in.Path}
	var md *bao.KVMetadata
	err := s.Client.do(ctx, func(c *bao.Client) error {
		var err error
		md, err = c.KVv2(in.Mount).GetMetadata(ctx, in.Path)
		return err
	})
	switch {
	case err == nil:
		if !owner.owns(md.CustomMetadata) {
			return out, &Failure{Reason: ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s exists and does not belong to this Tenant", in.Mount, in.Path)}
		}
		if md.CurrentVersion > 0 {
			out.Version = md.CurrentVersion
			return out, nil
		}
	case notFound(err):
		if err := s.Client.do(ctx, func(c *bao.Client) error {
			return c.KVv2(in.Mount).PutMetadata(ctx, in.Path, bao.KVMetadataPutInput{CustomMetadata: toAny(owner.metadata())})
		}); err != nil {
			return out, classify(err, "metadata write")
		}
	default:
		return out, classify(err, "metadata read")
	}
	password, err := GeneratePassword()
	if err != nil {
		return out, err
	}
	data := map[string]any{"username": in.Username, "password": password, "database": in.Database, "host": in.Host,
		"hostaddr": in.HostAddr, "port": strconv.Itoa(int(in.Port)), "sslmode": in.SSLMode}
	var sec *bao.KVSecret
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var err error
		sec, err = c.KVv2(in.Mount).Put(ctx, in.Path, data, bao.WithCheckAndSet(0))
		return err
	})
	if err != nil {
		// Lost a cas=0 race (or the write landed and the reply was lost):
		// read the record back and decide from the facts.
		var md2 *bao.KVMetadata
		if rerr := s.Client.do(ctx, func(c *bao.Client) error {
			var e error
			md2, e = c.KVv2(in.Mount).GetMetadata(ctx, in.Path)
			return e
		}); rerr == nil && owner.owns(md2.CustomMetadata) && md2.CurrentVersion > 0 {
			out.Version = md2.CurrentVersion
			return out, nil
		}
		return out, classify(err, "credential write")
	}
	out.Version, out.Created = sec.VersionMetadata.Version, true
	return out, nil
}

// Read returns the current password of a record after proving ownership.
// The password stays in memory; callers never log or return it.
func (s *Store) Read(ctx context.Context, mount, path string, owner Owner) (password string, version int, err error) {
	var md *bao.KVMetadata
	var sec *bao.KVSecret
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		if md, e = c.KVv2(mount).GetMetadata(ctx, path); e != nil {
			return e
		}
		sec, e = c.KVv2(mount).Get(ctx, path)
		return e
	})
	if notFound(err) {
		return "", 0, &Failure{Reason: ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s does not exist", mount, path)}
	}
	if err != nil {
		return "", 0, classify(err, "credential read")
	}
	if !owner.owns(md.CustomMetadata) {
		return "", 0, &Failure{Reason: ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s does not belong to this Tenant", mount, path)}
	}
	p, _ := sec.Data["password"].(string)
	if p == "" {
		return "", 0, &Failure{Reason: ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s has no password", mount, path)}
	}
	return p, sec.VersionMetadata.Version, nil
}

// Destroy removes the record with all versions and metadata when it belongs
// to owner (absent: nothing to do), then reads back that it is gone.
func (s *Store) Destroy(ctx context.Context, mount, path string, owner Owner) error {
	var md *bao.KVMetadata
	err := s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		md, e = c.KVv2(mount).GetMetadata(ctx, path)
		return e
	})
	if notFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, "metadata read")
	}
	if !owner.owns(md.CustomMetadata) {
		return &Failure{Reason: ReasonConflict, Message: fmt.Sprintf("refusing to destroy %s/%s: it does not belong to this Tenant", mount, path)}
	}
	if err := s.Client.do(ctx, func(c *bao.Client) error { return c.KVv2(mount).DeleteMetadata(ctx, path) }); err != nil {
		return classify(err, "destroy")
	}
	err = s.Client.do(ctx, func(c *bao.Client) error {
		_, e := c.KVv2(mount).GetMetadata(ctx, path)
		return e
	})
	if !notFound(err) {
		return &Failure{Reason: ReasonDependencyUnavailable, Message: "the OpenBao record still exists after destroy"}
	}
	return nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
