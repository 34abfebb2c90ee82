package postgresql_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// askingServer is a listener that speaks PostgreSQL's start-up protocol
// (with TLS when it has a certificate), answers every start-up with the
// authentication request auth and records every byte it receives after
// that: a password sent to it is in got.
type askingServer struct {
	ln   net.Listener
	cert *tls.Certificate
	auth pgproto3.BackendMessage
	mu   sync.Mutex
	got  bytes.Buffer
}

func (s *askingServer) serve(t *testing.T) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.handle(t, c)
	}
}

func (s *askingServer) handle(t *testing.T, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.SSLRequest); ok {
		if s.cert == nil {
			_, _ = c.Write([]byte("N"))
		} else {
			_, _ = c.Write([]byte("S"))
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*s.cert}})
			if tc.Handshake() != nil {
				return
			}
			c = tc
			be = pgproto3.NewBackend(c, c)
		}
		if msg, err = be.ReceiveStartupMessage(); err != nil {
			return
		}
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok {
		return
	}
	be.Send(s.auth)
	if err := be.Flush(); err != nil {
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		s.mu.Lock()
		s.got.Write(buf[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// TestNoPasswordToAServerThatAsksForCleartext: a server (or anything
// listening where an endpoint points) that asks for a cleartext or md5
// password, or lets the client in without authentication, gets no
// password from any connection the executor opens (admin and Tenant
// logins, with and without TLS), and the failure says why.
func TestNoPasswordToAServerThatAsksForCleartext(t *testing.T) {
	const canary = "CANARY-wire-password-5f1e"
	ca, err := integration.NewCA("wire-test")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ca.Issue([]string{"localhost"}, []string{"127.0.0.1"}, time.Hour, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(sc.CertPEM, sc.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, auth := range []struct {
		name   string
		msg    pgproto3.BackendMessage
		method string
	}{
		{"cleartext", &pgproto3.AuthenticationCleartextPassword{}, "password"},
		{"md5", &pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}}, "md5"},
		{"no authentication", &pgproto3.AuthenticationOk{}, "no authentication"},
		{"SCRAM without channel binding", &pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}, "channel binding"},
	} {
		for _, sslMode := range []string{"disable", "require", "verify-full"} {
			if sslMode == "disable" && auth.method == "channel binding" {
				continue // without TLS there is no channel to bind to
			}
			t.Run(auth.name+"/"+sslMode, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				srv := &askingServer{ln: ln, auth: auth.msg}
				if sslMode != "disable" {
					srv.cert = &cert
				}
				go srv.serve(t)
				port := ln.Addr().(*net.TCPAddr).Port
				target := pgexec.Target{Endpoint: dbcontract.Endpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(port), Database: "postgres", SSLMode: sslMode},
					Creds: pgexec.Credentials{Username: "admin", Password: canary}}
				admin, err := pgexec.ConnConfig(target, roots, false, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				tenant, err := pgexec.TenantConnConfig(target, pgexec.TenantLogin{Role: "app", Password: canary, Database: "app"}, roots, true, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				for _, cfg := range []*pgx.ConnConfig{admin, tenant} {
					conn, err := pgx.ConnectConfig(context.Background(), cfg)
					if err == nil {
						conn.Close(context.Background())
						t.Fatal("connected")
					}
					f := pgexec.Classify(err)
					var failure *dbcontract.Failure
					if !errors.As(f, &failure) || failure.Reason != dbcontract.ReasonAuthenticationFailed ||
						!strings.Contains(failure.Message, auth.method) && !(sslMode != "disable" && strings.Contains(failure.Message, "channel binding")) ||
						!strings.Contains(failure.Message, "no password was sent") || failure.Transient {
						t.Fatalf("classified %v as %+v", err, f)
					}
					if strings.Contains(failure.Message, canary) {
						t.Fatal("the message holds the password")
					}
				}
				time.Sleep(100 * time.Millisecond)
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if bytes.Contains(srv.got.Bytes(), []byte(canary)) {
					t.Fatalf("the server received the password: %q", srv.got.String())
				}
			})
		}
	}
}
