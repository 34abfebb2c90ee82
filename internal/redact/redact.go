// Package redact removes credentials from URLs (and from error messages
// that quote them) before a binary prints them: a NATS server URL may
// carry a password or a token, an HTTP URL a token in its query.
//
// What counts as a credential: the password of the userinfo; a userinfo
// without a password (NATS reads a lone user name as a token); the value
// of a query parameter whose name looks like a credential (token, pass,
// pwd, secret, key, auth, sig, cred, jwt, seed, session); the fragment.
// Everything else (scheme, user name next to a password, host, port,
// path, other query parameters) is kept, so the message stays useful.
package redact

import (
	"net/url"
	"strconv"
	"strings"
)

// Mask replaces every redacted value.
const Mask = "xxxxx"

// credentialKeys are substrings of query parameter names (lower case)
// whose values are credentials.
var credentialKeys = []string{"token", "pass", "pwd", "secret", "key", "auth", "sig", "cred", "jwt", "seed", "session"}

// noScheme is prepended to a value without "://" so that url.Parse reads
// "user:pass@host:port" as an authority (NATS clients accept URLs without
// a scheme); it is removed again from the result.
const noScheme = "redact-no-scheme://"

// URL returns raw with its credentials replaced by Mask (see the package
// documentation). A value url.Parse rejects is still redacted: everything
// before the last '@' of the part after "://" (the userinfo) becomes Mask,
// and a query or fragment becomes "?xxxxx" / "#xxxxx". The empty string
// stays empty.
func URL(raw string) string {
	if raw == "" {
		return ""
	}
	if !strings.Contains(raw, "://") {
		return strings.TrimPrefix(URL(noScheme+raw), noScheme)
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil && strings.Contains(u.Path, "@") {
		// An '@' in the path without userinfo: a password with a '/'
		// ("nats://u:12/x@h"), which url.Parse splits at the '/'.
		return unparsed(raw)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else {
			u.User = url.User(Mask)
		}
	}
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery)
	}
	if u.Fragment != "" || u.RawFragment != "" {
		u.Fragment, u.RawFragment = Mask, ""
	}
	return u.String()
}

// URLList redacts a comma-separated list of URLs (a NATS server list),
// element by element with URL, keeping the separators and spacing.
func URLList(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		trimmed := strings.TrimSpace(p)
		if trimmed == "" {
			continue
		}
		lead := p[:strings.Index(p, trimmed)]
		parts[i] = lead + URL(trimmed) + p[len(lead)+len(trimmed):]
	}
	return strings.Join(parts, ",")
}

// Error returns err with every credential of the URLs in raws removed
// from its message (raws may be comma-separated lists): first each URL as
// written (also in Go's %q form) is replaced by its URL form, then any
// remaining occurrence of a credential value (raw or percent-decoded) by
// Mask (safety first: a very short credential also masks unrelated text).
// It returns nil for nil and err itself when nothing needed
// redaction; otherwise an error whose Error() is the redacted message and
// whose Unwrap() is err (errors.Is/As keep working; do not print the
// unwrapped error).
func Error(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := Text(msg, raws...)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// Text is Error for a message string: msg with every credential of the
// URLs in raws removed.
func Text(msg string, raws ...string) string {
	var all []string
	for _, raw := range raws {
		all = append(all, raw)
		if strings.Contains(raw, ",") {
			for _, p := range strings.Split(raw, ",") {
				if p = strings.TrimSpace(p); p != "" {
					all = append(all, p)
				}
			}
		}
	}
	for _, raw := range all {
		if raw == "" {
			continue
		}
		shown := URL(raw)
		if strings.Contains(raw, ",") {
			shown = URLList(raw)
		}
		msg = strings.ReplaceAll(msg, strconv.Quote(raw), strconv.Quote(shown))
		msg = strings.ReplaceAll(msg, raw, shown)
	}
	for _, raw := range all {
		for _, s := range secrets(raw) {
			msg = strings.ReplaceAll(msg, s, Mask)
		}
	}
	return msg
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// secrets returns the credential values of raw, as written and decoded,
// longest first (so that a value containing another is replaced whole).
func secrets(raw string) []string {
	var out []string
	add := func(vs ...string) {
		for _, v := range vs {
			if v != "" && v != Mask {
				out = append(out, v)
			}
		}
	}
	addEncoded := func(v string) {
		add(v)
		if d, err := url.PathUnescape(v); err == nil {
			add(d)
		}
		if d, err := url.QueryUnescape(v); err == nil {
			add(d)
		}
	}
	rest := raw
	if _, r, ok := strings.Cut(raw, "://"); ok {
		rest = r
	}
	head, tail := rest, ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		head, tail = rest[:i], rest[i:]
	}
	// The userinfo ends at the last '@' before the query, as in unparsed
	// (a password may contain '/').
	if i := strings.LastIndex(head, "@"); i >= 0 {
		userinfo := head[:i]
		if _, pw, ok := strings.Cut(userinfo, ":"); ok {
			addEncoded(pw)
		} else {
			addEncoded(userinfo)
		}
	}
	q, frag, _ := strings.Cut(tail, "#")
	add(frag)
	if _, query, ok := strings.Cut(q, "?"); ok {
		for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, _ := strings.Cut(kv, "=")
			if credentialKey(k) {
				addEncoded(v)
			}
		}
	}
	// Longest first.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func credentialKey(k string) bool {
	if d, err := url.QueryUnescape(k); err == nil {
		k = d
	}
	k = strings.ToLower(k)
	for _, c := range credentialKeys {
		if strings.Contains(k, c) {
			return true
		}
	}
	return false
}

// redactQuery masks the values of credential-like parameters, keeping the
// order and the raw form of everything else.
func redactQuery(q string) string {
	pairs := strings.Split(q, "&")
	for i, kv := range pairs {
		if k, _, ok := strings.Cut(kv, "="); ok && credentialKey(k) {
			pairs[i] = k + "=" + Mask
		}
	}
	return strings.Join(pairs, "&")
}

// unparsed redacts a value url.Parse rejected.
func unparsed(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	suffix := ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		suffix = rest[i:i+1] + Mask
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = Mask + rest[i:]
	}
	return scheme + "://" + rest + suffix
}
