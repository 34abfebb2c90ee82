package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

const canary = "CANARY-5e1f"

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:" + canary + "@127.0.0.1:4222", "nats://user:xxxxx@127.0.0.1:4222"},
		// A lone user name is a NATS token.
		{"nats://" + canary + "@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"tls://user:" + canary + "@h:4443/", "tls://user:xxxxx@h:4443/"},
		{"https://bao:8200/v1?token=" + canary + "&x=1", "https://bao:8200/v1?token=xxxxx&x=1"},
		{"https://h/?X-Amz-Signature=" + canary + "&api_key=" + canary + "&password=" + canary + "&auth=" + canary, "https://h/?X-Amz-Signature=xxxxx&api_key=xxxxx&password=xxxxx&auth=xxxxx"},
		{"https://h/#access_token=" + canary, "https://h/#xxxxx"},
		// Without a scheme, as NATS clients accept it.
		{"user:" + canary + "@127.0.0.1:4222", "user:xxxxx@127.0.0.1:4222"},
		{"127.0.0.1:4222", "127.0.0.1:4222"},
		// Unparseable: credentials dropped all the same.
		{"nats://user:CAN ARY-5e1f@127.0.0.1:1", "nats://xxxxx@127.0.0.1:1"},
		{"nats://u:" + canary + "%zz@127.0.0.1:1", "nats://xxxxx@127.0.0.1:1"},
		{"nats://h:1/%zz?token=" + canary, "nats://h:1/%zz?xxxxx"},
		{"nats://u:12/" + canary + "@h:1", "nats://xxxxx@h:1"},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestURLList(t *testing.T) {
	in := "nats://a:" + canary + "@h1:4222, nats://" + canary + "@h2:4222,tls://h3:4443"
	want := "nats://a:xxxxx@h1:4222, nats://xxxxx@h2:4222,tls://h3:4443"
	if got := URLList(in); got != want {
		t.Fatalf("URLList = %q, want %q", got, want)
	}
}

func TestError(t *testing.T) {
	if Error(nil, "x") != nil {
		t.Fatal("Error(nil) must be nil")
	}
	base := errors.New("boom")
	for _, raw := range []string{
		"nats://user:" + canary + "@127.0.0.1:1",
		"nats://user:CAN ARY-5e1f@127.0.0.1:1",
		"nats://u:" + canary + "%zz@127.0.0.1:1",
		"nats://" + canary + "@h:1,nats://u:" + canary + "@h2:1",
		"https://h/?token=" + url.QueryEscape(canary+"/+"),
		"nats://u:12/" + canary + "@h:1",
	} {
		_, perr := url.Parse(raw)
		for _, err := range []error{
			fmt.Errorf("connect to %s: %w", raw, base),
			fmt.Errorf("dial %q: %w", raw, base),
			perr,
		} {
			if err == nil {
				continue
			}
			got := Error(err, raw)
			if strings.Contains(got.Error(), "CANARY") || strings.Contains(got.Error(), "CAN ARY") {
				t.Errorf("Error(%q) still shows the secret: %s", err, got)
			}
		}
	}
	// A library that prints the decoded or the encoded value.
	tokURL := "https://h/?token=" + url.QueryEscape(canary+"/+")
	if got := Error(fmt.Errorf("token %s, raw %s", canary+"/+", url.QueryEscape(canary+"/+")), tokURL); strings.Contains(got.Error(), "CANARY") {
		t.Errorf("query value shown: %s", got)
	}
	wrapped := Error(fmt.Errorf("connect to nats://u:%s@h: %w", canary, base), "nats://u:"+canary+"@h")
	if !errors.Is(wrapped, base) {
		t.Error("Error must keep the chain for errors.Is")
	}
	if want := "connect to nats://u:xxxxx@h: boom"; wrapped.Error() != want {
		t.Errorf("got %q, want %q", wrapped.Error(), want)
	}
	plain := errors.New("no secret here")
	if Error(plain, "nats://h:1") != plain { //nolint:errorlint // the same error value, unchanged, is the point
		t.Error("an error without secrets must be returned unchanged")
	}
}
