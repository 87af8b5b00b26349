package recovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// errAbandoned rolls back a chunk whose journal open failed.
var errAbandoned = errors.New("recovery: replay abandoned")

// replayer applies the records the journal's Open delivers
// (journal.Options.Deliver) during its own verifying pass, so the journal
// to replay is read once, and applies them where they lie in the journal's
// read buffer, without a copy.
//
// Records are applied in chunks of Options.ChunkRecords, one index Update
// each, so memory stays bounded by a chunk's dirty pages rather than by the
// journal's length. Update takes a function, and the records arrive through
// callbacks on the caller's goroutine, so each chunk's Update runs on a
// goroutine of its own: its function hands the Tx over and waits for the
// chunk to end (the goroutines meet twice per chunk, never per record; the
// Tx is used by one goroutine at a time, handed over through channels). The
// journal delivers a batch only once its end frame verified, so a torn
// batch is never applied even in part; a chunk may end inside a batch.
//
// Updates are in memory only: nothing reaches the disk before a
// checkpoint, which is taken only once the journal's Open succeeded (by
// Run through Options.Checkpoint, or by the caller after Run returned), so
// if the journal's Open fails after some chunks were applied, closing the
// page file discards them.
type replayer struct {
	st  *State
	o   Options
	rep *Report

	// The open chunk: tx is nil if none.
	tx    *index.Tx
	end   chan error // tells the Update's function to return this (nil: commit)
	res   chan error // the Update's result
	n     int
	bytes int64
	last  journal.Location

	// The replay's span: first is when the first record arrived, seen a
	// time since (taken every timeEvery records: a clock read costs
	// hundreds of ns on some virtual machines) and after the last record.
	first, seen time.Time
	count       int64 // records delivered
	err         error // the first error applying or committing a chunk
}

// timeEvery is how often, in records, deliver reads the clock.
const timeEvery = 64

// deliver applies one record, in the open chunk or a new one.
func (p *replayer) deliver(loc journal.Location, r journal.Record) error {
	if p.count%timeEvery == 0 {
		p.seen = time.Now()
		if p.count == 0 {
			p.first = p.seen
		}
	}
	p.count++
	if p.tx != nil && p.n >= p.o.ChunkRecords {
		if err := p.commit(); err != nil {
			return err
		}
	}
	if p.tx == nil {
		if err := p.begin(); err != nil {
			p.err = err
			return err
		}
	}
	if err := p.o.Apply(p.tx, loc, r); err != nil {
		err = fmt.Errorf("recovery: replay %s: %w", loc, err)
		p.err = err
		p.finish(err)
		return err
	}
	p.n++
	p.bytes += int64(len(r.Payload))
	p.last = loc
	if p.count%timeEvery == 0 {
		p.seen = time.Now()
	}
	return nil
}

// span returns the time from the first record delivered to the last one
// applied, to within timeEvery records.
func (p *replayer) span() time.Duration {
	if p.count == 0 {
		return 0
	}
	return p.seen.Sub(p.first)
}

// begin starts a chunk: an index Update on its own goroutine, whose Tx it
// takes over.
func (p *replayer) begin() error {
	txc := make(chan *index.Tx)
	end, res := make(chan error), make(chan error, 1)
	go func() {
		res <- p.st.Index.Update(func(tx *index.Tx) error {
			txc <- tx
			return <-end
		})
	}()
	select {
	case tx := <-txc:
		p.tx, p.end, p.res = tx, end, res
		return nil
	case err := <-res: // Update failed before it called the function
		return err
	}
}

// commit ends the open chunk (if any), committing it.
func (p *replayer) commit() error {
	if p.tx == nil {
		return nil
	}
	if err := p.finish(nil); err != nil {
		p.err = err
		return err
	}
	p.rep.RecordsReplayed += int64(p.n)
	p.rep.BytesReplayed += p.bytes
	p.st.LastApplied = p.last
	p.n, p.bytes = 0, 0
	return nil
}

// finish makes the open chunk's Update return: it commits if abort is nil,
// else rolls back. It returns the Update's result.
func (p *replayer) finish(abort error) error {
	p.tx = nil
	p.end <- abort
	return <-p.res
}

// abandon rolls back the open chunk, if any (the journal's Open failed, or
// a panic unwinds Run).
func (p *replayer) abandon() {
	if p.tx != nil {
		_ = p.finish(errAbandoned)
	}
}
