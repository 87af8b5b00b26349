package recovery

import (
	"errors"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// errChunkFull stops Iterate at a chunk boundary.
var errChunkFull = errors.New("recovery: chunk full")

// replay applies the journal after from in chunks of o.ChunkRecords records:
// each chunk is one index Update inside which the journal is iterated, so no
// record outlives its application and memory stays bounded by the chunk's
// dirty pages rather than by the journal's length. Iterate verifies a whole
// journal batch before it delivers its first record, so a torn batch is never
// half-applied; a chunk may end inside a batch, and the next chunk resumes
// after the last record applied.
func replay(st *State, o Options, rep *Report, from journal.Location) error {
	skipFirst := !from.IsZero()
	for {
		var (
			n, bytes int64
			last     journal.Location
			done     bool
		)
		err := st.Index.Update(func(tx *index.Tx) error {
			err := st.Journal.Iterate(from, func(loc journal.Location, r journal.Record) error {
				if skipFirst && !from.Less(loc) {
					return nil // covered by the checkpoint, or by the last chunk
				}
				if n >= int64(o.ChunkRecords) {
					return errChunkFull
				}
				if err := o.Apply(tx, loc, r); err != nil {
					return fmt.Errorf("recovery: replay %s: %w", loc, err)
				}
				n++
				bytes += int64(len(r.Payload))
				last = loc
				return nil
			})
			switch {
			case err == nil:
				done = true
				return nil
			case errors.Is(err, errChunkFull):
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
		if n > 0 {
			rep.RecordsReplayed += n
			rep.BytesReplayed += bytes
			st.LastApplied = last
		}
		if done {
			return nil
		}
		from, skipFirst = last, true
	}
}
