package openbao

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"time"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// Ownership metadata keys written into custom_metadata.
const (
	MetaInstanceUID = "ayatori.ddupan.top/instance-uid"
	MetaTenantUID   = "ayatori.ddupan.top/tenant-uid"
	MetaTenant      = "ayatori.ddupan.top/tenant"
)

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
func (s *Store) Write(ctx context.Context, in dbcontract.CredentialIntent, owner Owner) (dbcontract.CredentialOutcome, error) {
	out := dbcontract.CredentialOutcome{Path: in.Path}
	var md *bao.KVMetadata
	err := s.Client.do(ctx, func(c *bao.Client) error {
		var err error
		md, err = c.KVv2(in.Mount).GetMetadata(ctx, in.Path)
		return err
	})
	switch {
	case err == nil:
		if !owner.owns(md.CustomMetadata) {
			return out, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s exists and does not belong to this Tenant", in.Mount, in.Path)}
		}
		if md.CurrentVersion > 0 {
			if f := unreadable(md, in.Mount, in.Path, time.Now()); f != nil {
				return out, f
			}
			return s.follow(ctx, in, md.CurrentVersion)
		}
		if in.AlreadyIssued {
			return out, missingRecord(in)
		}
	case notFound(err):
		if in.AlreadyIssued {
			return out, missingRecord(in)
		}
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
	data := map[string]any{"password": password}
	for k, v := range dbcontract.ConnectionFields(in) {
		data[k] = v
	}
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

// follow reuses the current version when its connection fields match the
// intent; otherwise (the Instance endpoint changed) it writes a new version
// with the same password and the new fields (cas = the version read, so a
// concurrent writer can never be overwritten). Never a new password.
func (s *Store) follow(ctx context.Context, in dbcontract.CredentialIntent, current int) (dbcontract.CredentialOutcome, error) {
	out := dbcontract.CredentialOutcome{Path: in.Path, Version: current}
	var sec *bao.KVSecret
	err := s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		sec, e = c.KVv2(in.Mount).GetVersion(ctx, in.Path, current)
		return e
	})
	if err != nil {
		return out, classify(err, "credential read")
	}
	password, _ := sec.Data["password"].(string)
	if password == "" {
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s has no password; Ayatori never writes a second one", in.Mount, in.Path)}
	}
	want := dbcontract.ConnectionFields(in)
	var changed []string
	for k, v := range want {
		if got, _ := sec.Data[k].(string); got != v {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		return out, nil
	}
	data := map[string]any{"password": password}
	for k, v := range want {
		data[k] = v
	}
	var put *bao.KVSecret
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		put, e = c.KVv2(in.Mount).Put(ctx, in.Path, data, bao.WithCheckAndSet(current))
		return e
	})
	if err != nil {
		return out, classify(err, "credential update")
	}
	sort.Strings(changed)
	out.Version, out.Updated = put.VersionMetadata.Version, changed
	return out, nil
}

// missingRecord is the Conflict of an absent record whose password was
// already issued: writing a new one would give the application a password
// the role does not have.
func missingRecord(in dbcontract.CredentialIntent) *dbcontract.Failure {
	return &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s is missing, but this Tenant's password was already issued "+
		"(role %s may hold it); Ayatori never generates a second password or resets the role's password: restore the record "+
		"(an OpenBao snapshot, with its custom_metadata) or see \"KV record lost or deleted\" in docs/database/README.md", in.Mount, in.Path, in.Username)}
}

// unreadable reports a record whose current version is soft-deleted or
// destroyed (kv delete / kv destroy): the password is still the role's,
// so the admin restores that version; nothing is written meanwhile.
func unreadable(md *bao.KVMetadata, mount, path string, now time.Time) *dbcontract.Failure {
	v, ok := md.Versions[strconv.Itoa(md.CurrentVersion)]
	if !ok {
		return nil
	}
	switch {
	case v.Destroyed:
		return &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the current version %d of the OpenBao record %s/%s is destroyed and cannot be undeleted; "+
			"Ayatori never writes a second password: make a live version current again (kv rollback to an earlier version holding the same password) "+
			"or see \"KV record lost or deleted\" in docs/database/README.md", md.CurrentVersion, mount, path)}
	case !v.DeletionTime.IsZero() && !v.DeletionTime.After(now):
		return &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the current version %d of the OpenBao record %s/%s is deleted; "+
			"undelete it (bao kv undelete -mount=%s -versions=%d %s); Ayatori never writes a second password", md.CurrentVersion, mount, path, mount, md.CurrentVersion, path)}
	}
	return nil
}

// Read returns the current password of a record after proving ownership.
// The password stays in memory; callers never log or return it.
func (s *Store) Read(ctx context.Context, mount, path string, owner Owner) (password string, version int, err error) {
	var md *bao.KVMetadata
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		md, e = c.KVv2(mount).GetMetadata(ctx, path)
		return e
	})
	if notFound(err) {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s does not exist", mount, path)}
	}
	if err != nil {
		return "", 0, classify(err, "metadata read")
	}
	if !owner.owns(md.CustomMetadata) {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s does not belong to this Tenant", mount, path)}
	}
	if f := unreadable(md, mount, path, time.Now()); f != nil {
		return "", 0, f
	}
	var sec *bao.KVSecret
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		sec, e = c.KVv2(mount).Get(ctx, path)
		return e
	})
	if notFound(err) {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s has no readable version", mount, path)}
	}
	if err != nil {
		return "", 0, classify(err, "credential read")
	}
	p, _ := sec.Data["password"].(string)
	if p == "" {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf("the OpenBao record %s/%s has no password", mount, path)}
	}
	return p, sec.VersionMetadata.Version, nil
}

// Destroy removes the record with all versions and metadata when it belongs
// to owner (absent: nothing to do), then reads back that it is gone. A
// record of anyone else (a retained Tenant's, a foreign one) is left in
// place and reported in skipped: it is never a reason to keep the Tenant's
// finalizer (specification §11).
func (s *Store) Destroy(ctx context.Context, mount, path string, owner Owner) (skipped string, err error) {
	var md *bao.KVMetadata
	err = s.Client.do(ctx, func(c *bao.Client) error {
		var e error
		md, e = c.KVv2(mount).GetMetadata(ctx, path)
		return e
	})
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", classify(err, "metadata read")
	}
	if !owner.owns(md.CustomMetadata) {
		by := "no Ayatori owner"
		if uid, _ := md.CustomMetadata[MetaTenantUID].(string); uid != "" {
			by = "Tenant uid " + uid
			if name, _ := md.CustomMetadata[MetaTenant].(string); name != "" {
				by = "Tenant " + name + " (uid " + uid + ")"
			}
		}
		return fmt.Sprintf("the OpenBao record %s/%s belongs to %s, not this Tenant: left in place", mount, path, by), nil
	}
	if err := s.Client.do(ctx, func(c *bao.Client) error { return c.KVv2(mount).DeleteMetadata(ctx, path) }); err != nil {
		return "", classify(err, "destroy")
	}
	err = s.Client.do(ctx, func(c *bao.Client) error {
		_, e := c.KVv2(mount).GetMetadata(ctx, path)
		return e
	})
	if !notFound(err) {
		return "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "the OpenBao record still exists after destroy"}
	}
	return "", nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
