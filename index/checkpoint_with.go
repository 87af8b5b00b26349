package index

import "github.com/kdb-project/kdb/pagefile"

// CheckpointWith is Checkpoint for a caller whose meta depends on the state
// being checkpointed: meta is called under the writer lock, so what it
// returns (e.g. the journal position applied so far) matches the pages
// exactly. beforeCommit, if not nil, runs after the lock is released and
// before any byte of the checkpoint is written (e.g. to sync the journal);
// an error from it abandons the checkpoint.
func (s *Store) CheckpointWith(meta func() pagefile.MetaUpdate, beforeCommit func() error) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.wmu.Lock()
	commit, err := s.prepareLocked(meta())
	s.wmu.Unlock()
	if err != nil {
		return err
	}
	if beforeCommit != nil {
		if err := beforeCommit(); err != nil {
			return err
		}
	}
	return commit()
}
