package journal

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
)

// ScanForSecret scans every stored message of the journal stream and of
// its checkpoint stream (data and headers, decodable or not) for needle and
// returns the sequences that contain it (checkpoint hits as
// CheckpointHitBase + their sequence there). Tests call it with a canary
// password: the journal must never hold a secret value.
func (s *Store) ScanForSecret(ctx context.Context, needle string) ([]uint64, error) {
	n := []byte(needle)
	var hits []uint64
	scan := func(base uint64) func(data []byte, hdr nats.Header, seq uint64) error {
		return func(data []byte, hdr nats.Header, seq uint64) error {
			seq += base
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
		}
	}
	if err := s.ScanRaw(ctx, scan(0)); err != nil {
		return hits, err
	}
	if !s.checkpoints {
		return hits, nil
	}
	cps, err := s.js.Stream(ctx, CheckpointStreamName(s.cfg.StreamName))
	if err != nil {
		return hits, fmt.Errorf("journal: scan checkpoints: %w", err)
	}
	cpScan := scan(CheckpointHitBase)
	return hits, s.eachMsgOf(ctx, cps, checkpointPrefix(s.cfg.SubjectPrefix)+".>", 0, nil, 0, func(m storedMsg) error { return cpScan(m.data, m.hdr, m.seq) })
}

// CheckpointHitBase is added to the sequence of a ScanForSecret hit in the
// checkpoint stream.
const CheckpointHitBase = 1 << 62
