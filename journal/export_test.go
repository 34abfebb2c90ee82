package journal

// Test-only access for the external tests (package journal_test).

// SetUIDCacheLimit lowers the UID cache limit (uidCacheLimit) and returns
// the function that restores it.
func SetUIDCacheLimit(n int) (restore func()) {
	old := uidCacheLimit
	uidCacheLimit = n
	return func() { uidCacheLimit = old }
}

// LockUID exposes Store.lockUID.
func (s *Store) LockUID(uid string) (unlock func()) { return s.lockUID(uid) }

// UIDLocksInUse is the number of UID locks in the lock map.
func (s *Store) UIDLocksInUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uidLocks)
}

// CachedUIDs is the number of UID states in the cache.
func (s *Store) CachedUIDs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uids)
}

// SetNewerHeldLimit sets newerHeldLimit and returns a func restoring it.
func SetNewerHeldLimit(n int) (restore func()) {
	old := newerHeldLimit
	newerHeldLimit = n
	return func() { newerHeldLimit = old }
}

// MessageProof exposes SigningKey.messageProof (a newer manager's
// MessageProofHeader, for tests that publish as one).
func (k *SigningKey) MessageProof(subject string, data []byte) string {
	return k.messageProof(subject, data)
}
