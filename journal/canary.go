package journal

import (
	"bytes"
	"context"

	"github.com/nats-io/nats.go"
)

// ScanForSecret scans every stored message of the journal stream (data and
// headers, decodable or not) for needle and returns the sequences that
// contain it. Tests call it with a canary password: the journal must never
// hold a secret value.
func (s *Store) ScanForSecret(ctx context.Context, needle string) ([]uint64, error) {
	n := []byte(needle)
	var hits []uint64
	err := s.ScanRaw(ctx, func(data []byte, hdr nats.Header, seq uint64) error {
		if bytes.Contains(data, n) {
			hits = append(hits, seq)
			return nil
		}
		for k, vs := range hdr {
			for _, v := range vs {
				if bytes.Contains([]byte(k+v), n) {
					hits = append(hits, seq)
					return nil
				}
			}
		}
		return nil
	})
	return hits, err
}
