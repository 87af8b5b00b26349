package recovery

import (
	"errors"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// errChunkFull stops Iterate at a chunk boundary.
var errChunkFull = errors.New("recovery: chunk full")

// replay applies the journal after from, in chunks of whole journal batches
// of about o.ChunkRecords records, one index Update each, so that memory
// stays bounded by the checkpoint policy of the caller rather than by the
// journal's length.
func replay(st *State, o Options, rep *Report, from journal.Location) error {
	type rec struct {
		loc journal.Location
		r   journal.Record
	}
	var chunk []rec
	apply := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := st.Index.Update(func(tx *index.Tx) error {
			for _, c := range chunk {
				if err := o.Apply(tx, c.loc, c.r); err != nil {
					return fmt.Errorf("recovery: replay %s: %w", c.loc, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range chunk {
			rep.RecordsReplayed++
			rep.BytesReplayed += int64(len(c.r.Payload))
		}
		st.LastApplied = chunk[len(chunk)-1].loc
		chunk = chunk[:0]
		return nil
	}
	// Iterate stops once a chunk is full; the next pass resumes after the
	// last record taken. Iterate verifies a whole journal batch before it
	// delivers its first record, so a torn batch is never half-applied.
	start := from
	skipFirst := !from.IsZero()
	for {
		var last journal.Location
		err := st.Journal.Iterate(start, func(loc journal.Location, r journal.Record) error {
			if skipFirst && !from.Less(loc) {
				return nil // covered by the checkpoint, or by the last chunk
			}
			if len(chunk) >= o.ChunkRecords {
				return errChunkFull
			}
			chunk = append(chunk, rec{loc, r})
			last = loc
			return nil
		})
		if err != nil && !errors.Is(err, errChunkFull) {
			return fmt.Errorf("recovery: journal: %w", err)
		}
		if aerr := apply(); aerr != nil {
			return aerr
		}
		if err == nil {
			return nil
		}
		// Resume after the last applied record.
		start, skipFirst, from = last, true, last
	}
}
