package recovery

import (
	"fmt"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// chunkBytes bounds the payload bytes a replay chunk holds (a single larger
// record makes a chunk of its own). The chunk's buffer is allocated once at
// this size and reused: small enough to stay in the CPU's cache, large
// enough that a chunk's index Update is worth its commit.
const chunkBytes = 1 << 20

// replayer applies the records the journal's Open delivers
// (journal.Options.Deliver) during its own verifying pass, so the journal
// to replay is read once. Records are gathered into chunks of at most
// Options.ChunkRecords records and chunkBytes payload bytes, and each chunk
// is applied in one index Update: memory stays bounded by a chunk and its
// dirty pages rather than by the journal's length. The journal delivers a
// batch only once its end frame verified, so a torn batch is never applied
// even in part; a chunk may end inside a batch. Updates are in memory only:
// nothing reaches the disk before a checkpoint, which the caller takes only
// after Run returned, so if the journal's Open fails after some chunks were
// applied, closing the page file discards them.
type replayer struct {
	st  *State
	o   Options
	rep *Report

	recs  []chunkRec
	buf   []byte        // the chunk's payloads, back to back
	spent time.Duration // time spent applying chunks
	err   error         // the first error applying a chunk
}

// chunkRec is a record of the chunk: its payload is buf[off:off+n].
type chunkRec struct {
	loc journal.Location
	typ journal.RecordType
	off int
	n   int
}

// deliver copies a record the journal delivered into the chunk (its payload
// is valid only during the call), applying the chunk first if it is full.
func (p *replayer) deliver(loc journal.Location, r journal.Record) error {
	if len(p.recs) >= p.o.ChunkRecords || len(p.recs) > 0 && len(p.buf)+len(r.Payload) > chunkBytes {
		if err := p.flush(); err != nil {
			return err
		}
	}
	if p.buf == nil {
		p.buf = make([]byte, 0, chunkBytes)
	}
	p.recs = append(p.recs, chunkRec{loc: loc, typ: r.Type, off: len(p.buf), n: len(r.Payload)})
	p.buf = append(p.buf, r.Payload...)
	return nil
}

// flush applies the chunk in one index Update.
func (p *replayer) flush() error {
	if len(p.recs) == 0 {
		return nil
	}
	t := time.Now()
	defer func() { p.spent += time.Since(t) }()
	var bytes int64
	err := p.st.Index.Update(func(tx *index.Tx) error {
		for _, c := range p.recs {
			r := journal.Record{Type: c.typ, Payload: p.buf[c.off : c.off+c.n : c.off+c.n]}
			if err := p.o.Apply(tx, c.loc, r); err != nil {
				return fmt.Errorf("recovery: replay %s: %w", c.loc, err)
			}
			bytes += int64(c.n)
		}
		return nil
	})
	if err != nil {
		p.err = err
		return err
	}
	p.rep.RecordsReplayed += int64(len(p.recs))
	p.rep.BytesReplayed += bytes
	p.st.LastApplied = p.recs[len(p.recs)-1].loc
	p.recs, p.buf = p.recs[:0], p.buf[:0]
	return nil
}
