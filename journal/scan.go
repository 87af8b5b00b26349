package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// Open opens the journal in dir, creating dir and the first segment if
// needed (unless ReadOnly). It scans every segment to verify it and find the
// tail. A torn or partial batch at the tail of the last segment is
// truncated (the file is cut there, re-preallocated and synced) and
// reported; damage anywhere else fails Open with an error wrapping
// ErrCorrupt that names the segment and offset, or, with SkipDamaged, is
// skipped and listed in OpenReport.Skipped. On return the journal's
// existing records and directory are durable.
func Open(dir string, opts Options) (*Journal, *OpenReport, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	began := time.Now()
	j := &Journal{dir: dir, opts: opts, wake: make(chan struct{}, 1), unsynced: make(chan struct{}, 1), done: make(chan struct{})}
	j.fds = newFdCache(opts.FS, opts.MaxOpenSegments)
	rep := &OpenReport{}
	segs, nextID, err := j.scanAll(rep)
	if err != nil {
		for _, s := range segs {
			_ = s.close()
		}
		return nil, nil, err
	}
	j.mu.segs = segs
	j.mu.skipped = rep.Skipped
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		j.mu.tail = Location{last.id, last.end}
	}
	if !opts.ReadOnly {
		if err := j.startWriter(segs, nextID); err != nil {
			for _, s := range j.mu.segs {
				_ = s.close()
			}
			return nil, nil, err
		}
		go j.run()
	}
	rep.TailLocation = j.mu.tail
	rep.Duration = time.Since(began)
	return j, rep, nil
}

// startWriter prepares the writer's state (j.w) on the last segment, creating
// the first segment of an empty journal.
func (j *Journal) startWriter(segs []*segment, nextID SegmentID) error {
	w := &j.w
	if len(segs) > 0 && nextID > segs[len(segs)-1].id+1 {
		// Segments after the last one are missing (Options.Need, with
		// SkipDamaged): continue in a new segment after them, so that no
		// id the caller refers to names a different segment.
		last := segs[len(segs)-1]
		seg, err := j.createSegment(nextID)
		if err != nil {
			return err
		}
		// Sealed or not, what the scan found may be only in the OS cache:
		// see below.
		if err := segs[len(segs)-1].f.Sync(); err != nil {
			return fmt.Errorf("journal: sync %s: %w", last.id, err)
		}
		j.mu.segs = append(segs, seg)
		j.mu.tail = Location{seg.id, seg.end}
		j.mu.err = nil
		w.seg, w.off, w.synced, w.prev, w.prevOff, w.alloc = seg, segHeaderSize, segHeaderSize, seg.seed, -1, seg.size
		return nil
	}
	if len(segs) == 0 {
		seg, err := j.createSegment(nextID)
		if err != nil {
			return err
		}
		j.mu.segs = []*segment{seg}
		j.mu.tail = Location{seg.id, seg.end}
		j.mu.err = nil
		w.seg, w.off, w.synced, w.prev, w.prevOff, w.alloc = seg, segHeaderSize, segHeaderSize, seg.seed, -1, seg.size
		return nil
	}
	last := segs[len(segs)-1]
	w.seg, w.off, w.synced, w.prevOff, w.alloc = last, last.end, last.end, last.last, last.size
	w.prev = last.tailPrev
	// What the scan found may be only in the OS cache (a previous process
	// that did not sync); make it durable before anything read from it is
	// served, and so that the synced field of the next frames tells the
	// truth. A sealed last segment is no exception: a process that died
	// between writing the seal and its fdatasync (rotate) left it sealed
	// and unsynced. Segments before the last were synced when they were
	// sealed (rotate syncs the old segment before it creates the next).
	if err := last.f.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s: %w", last.id, err)
	}
	return nil
}

// scanAll opens and verifies every segment of the directory. It returns the
// segments kept (open) and the id the next new segment takes if none is
// kept.
func (j *Journal) scanAll(rep *OpenReport) (_ []*segment, nextID SegmentID, _ error) {
	fsys := j.opts.FS
	_, isDir, err := fsys.Stat(j.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !j.opts.ReadOnly:
		// Each new directory's entry is synced into its parent: a power
		// loss after Open must not lose the directory, and with it the
		// segments synced in it (docs/DESIGN.md, "The journal's
		// directories").
		if err := vfs.MkdirAllDurable(fsys, j.dir, 0o750); err != nil {
			return nil, 0, fmt.Errorf("journal: create %s: %w", j.dir, err)
		}
	case err != nil:
		return nil, 0, fmt.Errorf("journal: open %s: %w", j.dir, err)
	case !isDir:
		return nil, 0, fmt.Errorf("journal: open %s: not a directory", j.dir)
	case !j.opts.ReadOnly:
		// The directory exists, but a process that created it may have
		// died before syncing its entry: make it durable before trusting
		// (and appending to) what is in it.
		if err := fsys.SyncDir(filepath.Dir(j.dir)); err != nil {
			return nil, 0, fmt.Errorf("journal: open %s: sync parent: %w", j.dir, err)
		}
	}
	names, err := fsys.ReadDir(j.dir)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: open %s: %w", j.dir, err)
	}
	var ids []SegmentID
	for _, n := range names {
		if id, ok := parseSegmentName(n); ok {
			ids = append(ids, id)
		} else if _, ok := parseSegmentName(strings.TrimSuffix(n, tmpSuffix)); ok && n != strings.TrimSuffix(n, tmpSuffix) && !j.opts.ReadOnly {
			// A segment whose creation did not finish: never renamed, so
			// never written to.
			if err := fsys.Remove(filepath.Join(j.dir, n)); err != nil {
				return nil, 0, fmt.Errorf("journal: remove %s: %w", n, err)
			}
		}
	}
	if !j.opts.ReadOnly {
		// Even when no .tmp was removed: a process that renamed a new
		// segment into place may have died before syncing the directory,
		// and the records this Open trusts must keep their names.
		if err := fsys.SyncDir(j.dir); err != nil {
			return nil, 0, fmt.Errorf("journal: sync %s: %w", j.dir, err)
		}
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	rep.Segments = len(ids)
	missing, err := j.missingNeeded(ids)
	if err != nil {
		return nil, 0, err
	}
	rep.Skipped = append(rep.Skipped, missing...)
	var segs []*segment
	nextID = SegmentID(1)
	defer func() {
		if n := j.opts.Need.Last; len(missing) > 0 && nextID <= n {
			nextID = n + 1 // never reuse the id of a missing segment
		}
	}()
	var dl *deliverer
	if j.opts.Deliver != nil {
		dl = &deliverer{fn: j.opts.Deliver, from: j.opts.VerifyFrom}
		if from := j.opts.VerifyFrom; !from.IsZero() && !j.opts.SkipDamaged && len(ids) > 0 && ids[len(ids)-1] < from.Segment {
			// Refused before a torn tail of the last segment is cut: a
			// failed Open changes nothing.
			return nil, 0, fmt.Errorf("%w: %s: the replay position's segment is missing (the journal ends at %s)", ErrNotFound, from, ids[len(ids)-1])
		}
	}
	for i, id := range ids {
		if i > 0 && id != ids[i-1]+1 {
			d := Damage{From: Location{ids[i-1] + 1, 0}, To: Location{id, 0},
				Reason: MissingSegments(ids[i-1]+1, id-1)}
			if !j.opts.SkipDamaged {
				return segs, 0, fmt.Errorf("%w: %s: %s", ErrCorrupt, d.From, d.Reason)
			}
			rep.Skipped = append(rep.Skipped, d)
		}
		last := i == len(ids)-1
		var seg *segment
		var err error
		switch from := j.opts.VerifyFrom; {
		case j.opts.SkipDamaged || from.IsZero() || id > from.Segment || last && id < from.Segment:
			seg, err = j.scanSegment(id, last, segHeaderSize, rep, dl)
		case id == from.Segment:
			seg, err = j.scanSegment(id, last, from.Offset, rep, dl)
		default:
			seg, err = j.openUnverified(id)
			rep.Unverified++
		}
		if errors.Is(err, errUnsealed) && !last {
			// Name the later file: a stray one (a copy, a file of another
			// store) is the likelier cause than a lost seal.
			err = fmt.Errorf("%w (%s): if %s is not this store's (a copied or stray file), move it out of the store's directory", err, ids[i+1], ids[i+1])
		}
		if err != nil {
			return segs, 0, err
		}
		nextID = id + 1
		if seg == nil { // a torn, never completed last segment: removed
			nextID = id
			continue
		}
		segs = append(segs, seg)
		if !last {
			// Sealed (scanRecords refuses an unsealed segment before the
			// last): the cache may close it, so that Open holds at most
			// MaxOpenSegments descriptors whatever the journal's length.
			j.fds.add(seg)
		}
	}
	if len(segs) > 0 {
		// The last segment kept (the last one found, or the one before a
		// never completed last segment removed above) is the writer's.
		if err := j.fds.pin(segs[len(segs)-1], j.openFlag()); err != nil {
			return segs, 0, err
		}
	}
	if dl != nil {
		if err := dl.checkFrom(segs, j.opts.SkipDamaged); err != nil {
			return segs, 0, err
		}
	}
	return segs, nextID, nil
}

// errUnsealed is the damage of a segment that ends without a seal while a
// later segment exists (only the last segment may be unsealed).
// MissingSegments says that the segments from to to are missing.
func MissingSegments(from, to SegmentID) string {
	if from == to {
		return fmt.Sprintf("segment %s is missing", from)
	}
	return fmt.Sprintf("segments %s to %s are missing", from, to)
}

var errUnsealed = errors.New("segment ends without a seal, and a later segment exists")

// missingNeeded checks the segments found (ids, ascending) against
// Options.Need: it returns the missing ones as Damage if SkipDamaged, else
// an error wrapping ErrCorrupt that names them.
func (j *Journal) missingNeeded(ids []SegmentID) ([]Damage, error) {
	need := j.opts.Need
	var ds []Damage
	gone := func(from, to SegmentID, why string) {
		ds = append(ds, Damage{From: Location{from, 0}, To: Location{to + 1, 0},
			Reason: MissingSegments(from, to) + ": " + why})
	}
	switch {
	case len(ids) == 0 && need.Last != 0:
		first := need.First
		if first == 0 || first > need.Last {
			first = need.Last
		}
		gone(first, need.Last, "the journal has no segment, but the store needs them")
	case len(ids) == 0:
	default:
		if need.First != 0 && ids[0] > need.First {
			gone(need.First, ids[0]-1, fmt.Sprintf("the journal begins at %s, but the store needs it from %s", ids[0], need.First))
		}
		if last := ids[len(ids)-1]; need.Last != 0 && last < need.Last {
			gone(last+1, need.Last, fmt.Sprintf("the journal ends at %s, but the store refers to %s", last, need.Last))
		}
	}
	if len(ds) > 0 && !j.opts.SkipDamaged {
		return nil, fmt.Errorf("%w: %s: %s", ErrCorrupt, ds[0].From, ds[0].Reason)
	}
	return ds, nil
}

// deliverer passes the records Open verifies to Options.Deliver: those
// after from, a batch at a time once its end frame verified.
type deliverer struct {
	fn      func(Location, Record) error
	from    Location
	fromHit bool // a verifying frame began at from
	batch   []pendingRec
}

// pendingRec is a record of the batch being verified, delivered when the
// batch's end frame verifies.
type pendingRec struct {
	loc Location
	typ RecordType
	n   int // payload length
}

// add notes the verified frame h at loc as part of the current batch (a
// batch-begin frame first drops whatever an unfinished batch left).
func (d *deliverer) add(loc Location, h recHeader) {
	if loc == d.from {
		d.fromHit = true
	}
	if h.flags&flagBatchBegin != 0 {
		d.batch = d.batch[:0]
	}
	if h.typ < MinReservedType && d.from.Less(loc) {
		d.batch = append(d.batch, pendingRec{loc, h.typ, int(h.length)})
	}
}

// flush delivers the current batch, whose end frame verified, reading the
// payloads through r (again only if the batch spans r's windows).
func (d *deliverer) flush(r *chunkReader) error {
	for _, p := range d.batch {
		pb, err := r.at(p.loc.Offset+recHeaderSize, p.n)
		if err != nil {
			return err
		}
		if err := d.fn(p.loc, Record{Type: p.typ, Payload: pb}); err != nil {
			return err
		}
	}
	d.batch = d.batch[:0]
	return nil
}

// checkFrom checks that the replay position is a record of the journal:
// its segment was kept and, if it lies within the segment's records, a
// verifying frame began there.
func (d *deliverer) checkFrom(segs []*segment, skipDamaged bool) error {
	if d.from.IsZero() {
		return nil
	}
	for _, s := range segs {
		if s.id != d.from.Segment {
			continue
		}
		if !skipDamaged && !d.fromHit && d.from.Offset < s.end {
			return fmt.Errorf("%w: %s: the replay position is not a record", ErrCorrupt, d.from)
		}
		return nil
	}
	if skipDamaged {
		return nil // listed in OpenReport.Skipped (Options.Need); replay resumes at the next segment present
	}
	return fmt.Errorf("%w: %s: the replay position's segment is missing", ErrNotFound, d.from)
}

// openFile opens the file of segment id (read-only if the journal is).
func (j *Journal) openFile(id SegmentID) (*segment, error) {
	name := j.path(id)
	f, err := j.opts.FS.OpenFile(name, j.openFlag(), 0)
	if errors.Is(err, vfs.ErrNotRegular) {
		// A directory or a FIFO under a segment's name holds nothing of
		// the journal: damage, as a db.data or db.redo that is not a
		// regular file is (not an I/O error worth retrying).
		return nil, fmt.Errorf("%w: %s: not a regular file (%w): move it out of the store's directory", ErrCorrupt, id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", id, err)
	}
	return &segment{id: id, name: name, f: f, fds: j.fds, last: -1}, nil
}

// openFlag is how Open opens segments: read-write, or read-only if
// ReadOnly.
func (j *Journal) openFlag() int {
	if j.opts.ReadOnly {
		return os.O_RDONLY
	}
	return os.O_RDWR
}

// shortSegment is the error for a segment file shorter than its header.
func shortSegment(id SegmentID, size int64) error {
	return fmt.Errorf("%w: %s@0: segment of %d bytes, shorter than its %d-byte header: the file was cut", ErrCorrupt, id, size, segHeaderSize)
}

// openUnverified opens a segment before Options.VerifyFrom, checking only
// its header: its records are verified when first iterated.
func (j *Journal) openUnverified(id SegmentID) (*segment, error) {
	seg, err := j.openFile(id)
	if err != nil {
		return nil, err
	}
	f := seg.f
	hb := make([]byte, segHeaderSize)
	size, err := f.Size()
	if err == nil && size < segHeaderSize {
		err = shortSegment(id, size)
	}
	if err == nil {
		err = seg.readAt(hb, 0)
	}
	var h segHeader
	if err == nil {
		h, err = decodeSegHeader(hb, id.String())
	}
	if err == nil && h.id != id {
		err = fmt.Errorf("%w: %s@0: header names segment %d", ErrCorrupt, id, h.id)
	}
	if err == nil {
		err = h.checkStore(j.opts.StoreID, id.String())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	seg.seed, seg.size, seg.end, seg.sealed, seg.unverified = h.seed, size, size, true, true
	return seg, nil
}

// scanSegment opens and verifies one segment, its records from startOff on
// (see scanRecords). It returns nil (and no error) for a last segment whose
// header was never completed, after removing it (unless ReadOnly).
func (j *Journal) scanSegment(id SegmentID, last bool, startOff int64, rep *OpenReport, d *deliverer) (*segment, error) {
	fsys := j.opts.FS
	seg, err := j.openFile(id)
	if err != nil {
		return nil, err
	}
	f, name := seg.f, seg.name
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
		}
	}()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("journal: size of %s: %w", id, err)
	}
	seg.size = size
	r := &chunkReader{seg: seg, size: size}

	// The header alone: records may be verified from far into the segment.
	hb := make([]byte, min(size, segHeaderSize))
	if err := seg.readAt(hb, 0); err != nil {
		return nil, err
	}
	h, herr := decodeSegHeader(hb, id.String())
	if herr == nil && h.id != id {
		herr = fmt.Errorf("%w: %s@0: header names segment %d", ErrCorrupt, id, h.id)
	}
	foreign := false
	if herr == nil {
		// Not a crash's doing (a header is complete before the segment
		// is named): never taken for a segment whose creation was cut
		// below; skipped whole with SkipDamaged, as damage.
		herr = h.checkStore(j.opts.StoreID, id.String())
		foreign = herr != nil
	}
	if size < segHeaderSize {
		// Creation preallocates and syncs a segment before naming it,
		// and a torn tail is cut at a frame, after the header: a file
		// shorter than a header was cut by something else.
		herr = shortSegment(id, size)
	}
	if herr != nil {
		if errors.Is(herr, ErrVersionMismatch) {
			return nil, herr
		}
		if !foreign && last && size >= segHeaderSize && !j.beforeReplayPosition(Location{id, 0}) {
			// A segment whose creation did not complete has nothing after
			// its header: creation syncs the header before any record.
			fw, err := j.forward(r, id, 0, 0, size, size)
			if err != nil {
				return nil, err
			}
			if fw.dataEnd <= segHeaderSize {
				rep.TornAt = Location{id, 0}
				rep.TornBytesTruncated += size
				if j.opts.ReadOnly {
					return nil, nil
				}
				_ = f.Close()
				ok = true
				if err := fsys.Remove(name); err != nil {
					return nil, fmt.Errorf("journal: remove torn %s: %w", id, err)
				}
				if err := fsys.SyncDir(j.dir); err != nil {
					return nil, fmt.Errorf("journal: remove torn %s: sync dir: %w", id, err)
				}
				return nil, nil
			}
		}
		if !errors.Is(herr, ErrCorrupt) {
			herr = fmt.Errorf("%w: %w", ErrCorrupt, herr)
		}
		if !j.opts.SkipDamaged {
			return nil, herr
		}
		rep.Skipped = append(rep.Skipped, Damage{From: Location{id, 0}, To: Location{id, size}, Reason: herr.Error()})
		seg.end, seg.sealed = segHeaderSize, true
		ok = true
		return seg, nil
	}
	seg.seed = h.seed
	res, err := j.scanRecords(seg, r, last, startOff, rep, d, 0)
	if err != nil {
		return nil, err
	}
	seg.end, seg.last, seg.tailPrev, seg.sealed = res.end, res.last, res.tailPrev, res.sealed
	seg.prefixEnd = res.prefixEnd
	ok = true
	return seg, nil
}

// verifySegment verifies the records of a segment that Open did not
// (Options.VerifyFrom) and records its end, or, in the replay position's
// segment, the frames Open skipped before that position. A no-op for a
// verified one.
func (j *Journal) verifySegment(seg *segment, prefix bool) error {
	j.mu.Lock()
	todo, prefixEnd := seg.unverified, seg.prefixEnd
	j.mu.Unlock()
	if prefix && prefixEnd > 0 {
		// The bytes up to prefixEnd never change (a writer only appends
		// after end, and end is past prefixEnd), whether or not the
		// segment is the last one. The walk from the header must land
		// exactly on prefixEnd, the end of the replay position's frame,
		// with every frame, the chain into it included, verified.
		_, err := j.scanRecords(seg, &chunkReader{seg: seg, size: prefixEnd}, false, segHeaderSize, &OpenReport{}, nil, prefixEnd)
		if err != nil {
			return err
		}
		j.mu.Lock()
		seg.prefixEnd = 0
		j.mu.Unlock()
		return nil
	}
	if !todo {
		return nil
	}
	// INVARIANT: an unverified segment is never the last one, so nothing
	// writes to it and seg.size is fixed.
	res, err := j.scanRecords(seg, &chunkReader{seg: seg, size: seg.size}, false, segHeaderSize, &OpenReport{}, nil, 0)
	if err != nil {
		return err
	}
	j.mu.Lock()
	seg.end, seg.last, seg.tailPrev, seg.sealed = res.end, res.last, res.tailPrev, res.sealed
	seg.unverified = false
	j.mu.Unlock()
	return nil
}

// Verify verifies every segment that Open left unverified
// (Options.VerifyFrom), and the records Open skipped before the replay
// position in its own segment, oldest first, and returns the first damage found
// (an error wrapping ErrCorrupt naming the segment and offset). A segment
// that RemoveBefore removes meanwhile is skipped.
func (j *Journal) Verify() error {
	return j.verifySegments(0, true)
}

// verifySegments verifies the unverified segments from id on, and with
// prefixes the records before the replay position in its segment (Iterate
// needs no such pass: it verifies every frame and the chain it reads, and
// an unverified segment is verified here only to learn where it ends).
func (j *Journal) verifySegments(from SegmentID, prefixes bool) error {
	j.mu.Lock()
	if j.mu.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	var todo []*segment
	for _, s := range j.mu.segs {
		if s.id >= from && (s.unverified || prefixes && s.prefixEnd > 0) {
			todo = append(todo, s)
		}
	}
	j.mu.Unlock()
	for _, s := range todo {
		if err := j.verifySegment(s, prefixes); err != nil {
			if s.removed() {
				continue // RemoveBefore took it meanwhile: nothing left to verify
			}
			return err
		}
	}
	return nil
}

// scanEnd is where scanRecords found a segment's records to end.
type scanEnd struct {
	end      int64  // offset just past the last acknowledged frame
	last     int64  // offset of the last acknowledged frame, or -1
	tailPrev uint64 // sum of the frame at last (the seed if none)
	sealed   bool
	// prefixEnd is the end of the frame the scan started at, if it started
	// past the first frame (Options.VerifyFrom): the frames before it were
	// not verified. Zero if the scan began at the first frame.
	prefixEnd int64
}

// batchEndAt returns the header of the frame at off if it verifies and
// ends a batch.
func (j *Journal) batchEndAt(r *chunkReader, id SegmentID, seed uint64, off int64) (recHeader, bool) {
	if off < segHeaderSize || off%recAlign != 0 || off >= r.size {
		return recHeader{}, false
	}
	hb, err := r.at(off, recHeaderSize)
	if err != nil {
		return recHeader{}, false
	}
	var hdr [recHeaderSize]byte
	copy(hdr[:], hb)
	h, err := decodeRecHeader(hdr[:], id, off, j.opts.readMax(), r.size-off)
	if err != nil || h.flags&flagBatchEnd == 0 {
		return recHeader{}, false
	}
	pb, err := r.at(off+recHeaderSize, int(h.length))
	if err != nil || verifyRecord(h, hdr[:], pb, seed, id, off) != nil {
		return recHeader{}, false
	}
	return h, true
}

// scanRecords walks the frames of seg and returns where they end; it
// truncates a torn tail of the last segment. It starts at startOff if the
// frame there verifies and ends a batch (the caller's replay position, see
// Options.VerifyFrom), else at the first frame. If d is not nil, each batch
// is passed to it once its end frame verified (Options.Deliver): only
// batches before goodEnd, which no later decision (torn tail, damage)
// takes back. If stopAt is not zero the walk ends there, where a verified
// batch must have just ended (the prefix of the replay position's
// segment, see verifySegment): it is ErrCorrupt if the frames do not lead
// exactly to it.
func (j *Journal) scanRecords(seg *segment, r *chunkReader, last bool, startOff int64, rep *OpenReport, d *deliverer, stopAt int64) (scanEnd, error) {
	id, seed, size := seg.id, seg.seed, r.size // r.size: seg.size, or where a prefix walk stops
	maxRec := j.opts.readMax()
	off := int64(segHeaderSize)
	prev, prevKnown := seed, true
	inBatch, batchStart := false, off
	var batchRecs int64
	goodEnd, goodPrev, goodLast := off, seed, int64(-1)
	sealed, forceSeal := false, false
	if d != nil {
		d.batch = d.batch[:0]
	}
	prefixEnd := int64(0)
	if startOff > off {
		if h, ok := j.batchEndAt(r, id, seed, startOff); ok {
			// Start inside the segment: the chain links to the frame's own
			// prev field, and the frame may end a batch that began earlier.
			off, prev = startOff, h.prev
			inBatch, batchStart = h.flags&flagBatchBegin == 0, startOff
			prefixEnd = startOff + frameSize(int(h.length))
		}
	}
	var hdr [recHeaderSize]byte
	for {
		var h recHeader
		var err error
		hard := false // the frame at off verifies but is out of place
		if stopAt > 0 && off >= stopAt {
			break // checked below: the last verified batch must end there
		}
		if off >= size {
			err = fmt.Errorf("%w: %s: end of file", ErrTornTail, Location{id, off})
		} else {
			hb, rerr := r.at(off, recHeaderSize)
			if rerr != nil {
				return scanEnd{}, rerr
			}
			copy(hdr[:], hb)
			h, err = decodeRecHeader(hdr[:], id, off, maxRec, size-off)
			// Longer than any record this opener may read, yet within
			// the segment: not torn (a crash tears a frame its writer
			// wrote, within its bound), but written with a larger bound.
			hard = errors.Is(err, errAboveMax)
			if err == nil {
				pb, rerr := r.at(off+recHeaderSize, int(h.length))
				if rerr != nil {
					return scanEnd{}, rerr
				}
				err = verifyRecord(h, hdr[:], pb, seed, id, off)
			}
			if err == nil {
				begin := h.flags&flagBatchBegin != 0
				loc := Location{id, off}
				switch {
				case prevKnown && h.prev != prev:
					err = fmt.Errorf("%w: %s: checksum chain broken", ErrCorrupt, loc)
				case sealed:
					err = fmt.Errorf("%w: %s: record after the segment's seal", ErrCorrupt, loc)
				case begin && inBatch:
					err = fmt.Errorf("%w: %s: batch begins inside the batch at %d", ErrCorrupt, loc, batchStart)
				case !begin && !inBatch:
					err = fmt.Errorf("%w: %s: record outside any batch", ErrCorrupt, loc)
				case h.typ >= MinReservedType && h.flags != flagBatchBegin|flagBatchEnd:
					err = fmt.Errorf("%w: %s: internal record of type %#x inside a batch", ErrCorrupt, loc, h.typ)
				case h.typ >= MinReservedType && h.typ != typeSeal && h.typ != typeCloseMark:
					err = fmt.Errorf("%w: %s: reserved record type %#x, never written", ErrCorrupt, loc, h.typ)
				case h.typ >= MinReservedType && h.length != 0:
					err = fmt.Errorf("%w: %s: internal record of type %#x with a %d-byte payload", ErrCorrupt, loc, h.typ, h.length)
				}
				hard = err != nil
			}
		}
		if err == nil {
			if h.flags&flagBatchBegin != 0 {
				inBatch, batchStart, batchRecs = true, off, 0
			}
			if d != nil {
				d.add(Location{id, off}, h)
				if len(d.batch) > 0 {
					r.keep = d.batch[0].loc.Offset
				}
			}
			if h.typ < MinReservedType {
				batchRecs++
			}
			prev, prevKnown = h.sum, true
			if h.typ == typeSeal {
				sealed = true
			}
			fs := frameSize(int(h.length))
			if h.flags&flagBatchEnd != 0 {
				inBatch = false
				goodEnd, goodPrev, goodLast = off+fs, h.sum, off
				rep.Records += batchRecs
				if batchRecs > 0 {
					rep.Batches++
				}
				if d != nil {
					if err := d.flush(r); err != nil {
						return scanEnd{}, err
					}
					r.keep = 0
				}
			}
			off += fs
			continue
		}

		// The frame at off is damaged, zero, out of place, or the file
		// ends. Decide between the end of the log, a torn tail and damage.
		damageStart := off
		if inBatch {
			damageStart = batchStart
		}
		searchFrom := off + recAlign
		if hard && !errors.Is(err, errAboveMax) {
			// A frame that verifies but is out of place: what follows it
			// is searched. A length above the read bound is not trusted
			// that far (one flipped bit would skip up to a segment of
			// intact batches).
			searchFrom = off + frameSize(int(h.length))
		}
		fw, ferr := j.forward(r, id, seed, off, searchFrom, size)
		if ferr != nil {
			return scanEnd{}, ferr
		}
		clean := !hard && !inBatch && fw.dataEnd <= off
		durable := fw.maxSynced > damageStart // a later frame proves the damaged bytes were synced
		// The caller's replay position was durable, and every byte before
		// it: the log cannot end, nor a torn tail begin, at or before it.
		// (A last segment before the replay position's is refused by
		// scanAll before any segment is scanned.)
		lost := last && id == j.opts.VerifyFrom.Segment && j.beforeReplayPosition(Location{id, damageStart})
		switch {
		case clean && (last || sealed) && !lost:
			// The end of the log.
		case !clean && last && !sealed && !hard && !durable && !lost:
			// A torn tail: bytes of the last, unsynced write.
			end := max(fw.dataEnd, off)
			rep.TornAt = Location{id, damageStart}
			rep.TornBytesTruncated += end - damageStart
			if !j.opts.ReadOnly {
				if err := j.truncateTail(seg, damageStart); err != nil {
					return scanEnd{}, err
				}
			}
		default:
			if lost {
				what := "is damaged"
				if clean {
					what = "ends"
				}
				err = fmt.Errorf("%w: %s: the journal %s at or before the replay position %s, which was durable", ErrCorrupt, Location{id, damageStart}, what, j.opts.VerifyFrom)
				// With SkipDamaged nothing is appended here: the bytes
				// after the replay position may be lost, not overwritten,
				// and new records go to a new segment after it.
				forceSeal = true
			} else if clean {
				err = fmt.Errorf("%w: %s: %w", ErrCorrupt, Location{id, off}, errUnsealed)
			} else if durable {
				err = fmt.Errorf("%w (a later record proves the bytes from %s were durable)", err, Location{id, damageStart})
			} else if !last {
				err = fmt.Errorf("%w (in a segment that is not the last)", err)
			}
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			if !j.opts.SkipDamaged {
				return scanEnd{}, err
			}
			skipTo := fw.nextBegin
			if skipTo < 0 {
				skipTo = (max(fw.dataEnd, off+recAlign) + recAlign - 1) &^ (recAlign - 1)
				if !last && clean {
					skipTo = size
				}
			}
			rep.Skipped = append(rep.Skipped, Damage{From: Location{id, damageStart}, To: Location{id, skipTo}, Reason: err.Error()})
			off, prevKnown, inBatch = skipTo, false, false
			if d != nil {
				d.batch = d.batch[:0] // the damaged batch is never delivered
				r.keep = 0
			}
			goodEnd = skipTo
			if clean || skipTo >= size {
				break
			}
			continue
		}
		break
	}
	if stopAt > 0 && goodEnd != stopAt {
		return scanEnd{}, fmt.Errorf("%w: %s: the records before the replay position do not lead to it", ErrCorrupt, Location{id, goodEnd})
	}
	return scanEnd{end: goodEnd, last: goodLast, tailPrev: goodPrev, sealed: sealed || forceSeal, prefixEnd: prefixEnd}, nil
}

// beforeReplayPosition reports whether loc lies at or before the caller's
// replay position (Options.VerifyFrom): such bytes were durable before the
// caller recorded that position (a checkpoint syncs the journal first), so
// the log can neither end nor be torn there.
func (j *Journal) beforeReplayPosition(loc Location) bool {
	from := j.opts.VerifyFrom
	return !from.IsZero() && !from.Less(loc)
}

// truncateTail cuts the last segment at off, re-preallocates it with zeros
// and syncs, so that stale frames after off can never be read as records.
// On return the truncation is durable.
func (j *Journal) truncateTail(seg *segment, off int64) error {
	f := seg.f
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("journal: truncate torn tail of %s: %w", Location{seg.id, off}, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: truncate torn tail of %s: sync: %w", Location{seg.id, off}, err)
	}
	if n := j.allocFor(off) - off; n > 0 {
		if err := f.Allocate(off, n); err != nil {
			return fmt.Errorf("journal: preallocate %s: %w", seg.id, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("journal: preallocate %s: sync: %w", seg.id, err)
		}
	}
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("journal: size of %s: %w", seg.id, err)
	}
	seg.size = size
	return nil
}

// fwdResult is what a forward scan found after a damaged frame.
type fwdResult struct {
	maxSynced int64 // largest synced field of a verifying frame, or -1
	nextBegin int64 // offset of the first verifying batch-begin frame, or -1
	dataEnd   int64 // end of the last non-zero 8-byte word (at least from)
}

// forward scans [from, size) of a segment: it finds where non-zero bytes
// end and, from searchFrom on, every 8-aligned frame that verifies under
// seed. It allocates nothing beyond the reader's bounded window.
func (j *Journal) forward(r *chunkReader, id SegmentID, seed uint64, from, searchFrom, size int64) (fwdResult, error) {
	res := fwdResult{maxSynced: -1, nextBegin: -1, dataEnd: from}
	var hdr [recHeaderSize]byte
	p := from
	for p < size {
		n := int(min(4096, size-p))
		b, err := r.at(p, n)
		if err != nil {
			return res, err
		}
		i := firstNonZeroWord(b)
		if i < 0 {
			p += int64(len(b))
			continue
		}
		q := p + int64(i)
		res.dataEnd = max(res.dataEnd, min(q+recAlign, size))
		if q >= searchFrom {
			hb, err := r.at(q, recHeaderSize)
			if err != nil {
				return res, err
			}
			copy(hdr[:], hb)
			h, derr := decodeRecHeader(hdr[:], id, q, j.opts.readMax(), size-q)
			if derr == nil {
				pb, err := r.at(q+recHeaderSize, int(h.length))
				if err != nil {
					return res, err
				}
				if verifyRecord(h, hdr[:], pb, seed, id, q) == nil {
					fs := frameSize(int(h.length))
					res.maxSynced = max(res.maxSynced, int64(h.synced))
					if h.flags&flagBatchBegin != 0 && res.nextBegin < 0 {
						res.nextBegin = q
					}
					res.dataEnd = max(res.dataEnd, q+fs)
					p = q + fs
					continue
				}
			}
		}
		p = q + recAlign
	}
	return res, nil
}

// firstNonZeroWord returns the index of the first 8-byte word of b holding
// a non-zero byte (a trailing partial word counts), or -1.
func firstNonZeroWord(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != 0 {
			return i
		}
	}
	for k := i; k < len(b); k++ {
		if b[k] != 0 {
			return i
		}
	}
	return -1
}
