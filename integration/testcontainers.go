package integration

import (
	"context"
	"errors"
)

// newPostgresContainer, newOpenBaoContainer and newNATSContainer are the testcontainers
// provider (testcontainers_provider.go sets them in init).
var (
	newPostgresContainer = func(context.Context, PostgresOptions) (*Postgres, error) {
		return nil, errors.New("testcontainers provider: PostgreSQL container not available in this build")
	}
	newOpenBaoContainer = func(context.Context) (*OpenBao, error) {
		return nil, errors.New("testcontainers provider: OpenBao container not available in this build")
	}
	newNATSContainer = func(context.Context) (*NATS, error) {
		return nil, errors.New("testcontainers provider: NATS container not available in this build")
	}
)
