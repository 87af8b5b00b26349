package kvfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// Namespace is the kdb namespace of the FSM's trees.
const Namespace = "kv"

const (
	metaIndex = "meta"
	opPut     = 1
	opDelete  = 2
)

var (
	keyApplied = []byte("applied")
	keyGen     = []byte("gen")
	keySync    = []byte("sync")
	keyMaxPut  = []byte("maxput")
	// keyRestored: the applied index the last Restore took from its
	// snapshot (checkLogReaches).
	keyRestored = []byte("restored")
)

// DefaultMaxPutSize is the MaxPutSize of an FSM whose store has none
// recorded and whose Options leave it unset: 8 MiB less 96 bytes, the
// largest put (key and value) that one kdb batch of a store with kdb's
// default SegmentSize (32 MiB) takes, and so exactly what ApplyBatch
// accepted on such a store before the limit was recorded.
const DefaultMaxPutSize = 8<<20 - putOverhead

// Options configures an FSM. The zero value is valid.
type Options struct {
	// MaxPutSize is the largest put ApplyBatch applies, counted as the
	// length of its key plus that of its value; a larger one is answered
	// with kdb.ErrInvalid and applied as nothing, on every node alike. It
	// is a setting of the cluster, not of a node: Open records it in the
	// FSM's meta at the first open, a snapshot carries it, and Open
	// refuses a store that cannot hold a put of this size or that recorded
	// another, and a raftkdb log that cannot hold the raft entry of such a
	// put (see "Sizes" in the package doc). 1 to kdb.MaxValueSize; with a
	// raftkdb log, at most its MaxEntrySize less 46 (8 MiB less 46 bytes).
	// Default: the one recorded in the store, or for a store without one,
	// DefaultMaxPutSize.
	MaxPutSize int
}

func (o Options) validate() error {
	if o.MaxPutSize < 0 || o.MaxPutSize > kdb.MaxValueSize {
		return fmt.Errorf("kvfsm: Options.MaxPutSize %d: want 1 to %d (kdb.MaxValueSize), or 0 for the default: %w",
			o.MaxPutSize, kdb.MaxValueSize, kdb.ErrInvalid)
	}
	return nil
}

// ErrBadCommand is the response to an entry that is not a command.
var ErrBadCommand = errors.New("kvfsm: bad command")

// EncodePut returns the command that sets key to value.
func EncodePut(key, value []byte) []byte {
	b := binary.AppendUvarint([]byte{opPut}, uint64(len(key)))
	return append(append(b, key...), value...)
}

// EncodeDelete returns the command that removes key.
func EncodeDelete(key []byte) []byte {
	b := binary.AppendUvarint([]byte{opDelete}, uint64(len(key)))
	return append(b, key...)
}

func decode(cmd []byte) (op byte, key, value []byte, err error) {
	if len(cmd) < 2 {
		return 0, nil, nil, fmt.Errorf("%w: %d bytes", ErrBadCommand, len(cmd))
	}
	op = cmd[0]
	n, k := binary.Uvarint(cmd[1:])
	if k <= 0 || n == 0 || n > uint64(len(cmd)-1-k) || n > kdb.MaxKeySize {
		return 0, nil, nil, fmt.Errorf("%w: bad key length", ErrBadCommand)
	}
	key, value = cmd[1+k:1+k+int(n)], cmd[1+k+int(n):]
	switch {
	case op == opPut && len(value) == 0:
		return 0, nil, nil, fmt.Errorf("%w: empty value", ErrBadCommand)
	case op == opDelete && len(value) != 0:
		return 0, nil, nil, fmt.Errorf("%w: delete with a value", ErrBadCommand)
	case op != opPut && op != opDelete:
		return 0, nil, nil, fmt.Errorf("%w: op %d", ErrBadCommand, op)
	}
	return op, key, value, nil
}

// FSM is the key-value state machine. Reads (Get, Applied) are safe
// concurrently with raft's calls.
//
// Invariants:
//   - The data tree holds exactly the effect of every command entry up to
//     applied, and of none after it.
//   - ApplyBatch never applies past a hole: the first entry above applied is
//     applied+1, or every index between them is one raft does not hand an
//     FSM (a no-op or a barrier, checked in log) or at most floor, which a
//     snapshot CatchUp restored (or found applied) covers. Anything else
//     panics.
type FSM struct {
	db  *kdb.DB
	ns  *kdb.Namespace
	log raft.LogStore // raft's log, to check a gap before the next entry; nil: every gap is a hole

	mu      sync.RWMutex // Restore's switch of generation (and limit) against reads
	gen     uint64
	maxPut  int // the cluster's MaxPutSize, as recorded in meta; guarded by mu
	applied atomic.Uint64
	floor   atomic.Uint64 // the index of the snapshot CatchUp found; entries up to it are covered
	// snaps is raft's snapshot store (CatchUp or UseSnapshots, before
	// raft starts): entries up to its newest snapshot are covered too.
	snaps raft.SnapshotStore

	restores atomic.Uint64
}

var _ raft.BatchingFSM = (*FSM)(nil)

func dataIndex(gen uint64) string { return "d" + strconv.FormatUint(gen, 10) }

// Open returns the FSM kept in db, dropping a data generation a crashed
// Restore left half-copied, and the scratch copy of its snapshot beside
// db's directory (see Restore). log is raft's log store (the one given to
// raft.NewRaft): when the first entry of a batch is not the one after the
// applied index, ApplyBatch reads the entries in between to tell the gaps
// raft leaves on purpose (it does not hand an FSM its no-op and barrier
// entries) from a hole. With a nil log (an FSM used without raft) every gap
// is a hole.
//
// The FSM's MaxPutSize is the one recorded in the store. A store without
// one (a new store, or one written before the limit was recorded) records
// opts.MaxPutSize, or DefaultMaxPutSize if that is unset. Open refuses,
// with an error wrapping kdb.ErrInvalid and before it writes anything, an
// opts.MaxPutSize other than the recorded one (a node cannot change the
// cluster's limit alone: it would apply the same log differently from the
// others), a store whose batches cannot hold a put of MaxPutSize (its
// SegmentSize too small): that node would refuse puts the others apply,
// and a log whose entries cannot hold a put of MaxPutSize (log has a
// MaxEntrySize method, as raftkdb.Store does, under MaxPutSize plus 46
// bytes): raft could not log such a put, and its leader would step down
// instead of answering it. The error says the largest MaxPutSize allowed.
//
// A node that runs raft with Config.NoSnapshotRestoreOnStart must call
// CatchUp before raft.NewRaft.
func Open(db *kdb.DB, log raft.LogStore, opts Options) (*FSM, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ns, err := db.Namespace(Namespace)
	if err != nil {
		return nil, err
	}
	f := &FSM{db: db, ns: ns, log: log}
	applied, gen, recorded, err := readMeta(ns)
	if err != nil {
		return nil, err
	}
	limit, from := recorded, "recorded in the store"
	switch {
	case recorded == 0 && opts.MaxPutSize == 0:
		limit, from = DefaultMaxPutSize, "the default"
	case recorded == 0:
		limit, from = opts.MaxPutSize, "Options.MaxPutSize"
	case opts.MaxPutSize != 0 && opts.MaxPutSize != recorded:
		return nil, fmt.Errorf("kvfsm: Options.MaxPutSize %d differs from the MaxPutSize %d recorded in the store (at its first open, "+
			"or from the last snapshot it restored): the limit is the cluster's and a node cannot change it alone; "+
			"leave MaxPutSize unset to use the recorded one: %w", opts.MaxPutSize, recorded, kdb.ErrInvalid)
	}
	if err := fits(db, log, limit, from); err != nil {
		return nil, err
	}
	if err := removeRestoreDir(restoreDir(db)); err != nil {
		return nil, fmt.Errorf("kvfsm: removing what an interrupted Restore left: %w", err)
	}
	f.gen = gen
	f.maxPut = limit
	f.applied.Store(applied)
	var stray []string
	err = ns.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasPrefix(n, "d") && n != dataIndex(gen) {
				stray = append(stray, n)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(stray) > 0 || recorded == 0 {
		b := ns.NewBatch()
		for _, n := range stray {
			b.DropIndex(n)
		}
		if recorded == 0 {
			b.Put(metaIndex, keyMaxPut, u64(uint64(limit)))
		}
		if err := db.Write(b); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// fits returns an error wrapping kdb.ErrInvalid unless one kdb batch of db
// takes a put of limit bytes (key and value) and, when log says how large
// an entry it stores (raftkdb.Store.MaxEntrySize), log stores the raft entry
// of such a put; from says where the limit came from.
func fits(db *kdb.DB, log raft.LogStore, limit int, from string) error {
	maxBatch := db.MaxBatchSize()
	if n := batchCost(limit); n > maxBatch {
		return fmt.Errorf("kvfsm: MaxPutSize %d (%s): a put of that size takes %d bytes of a kdb batch, over what one batch of this store takes "+
			"(%d, a quarter of its SegmentSize): this node would refuse puts the others apply; open its store with SegmentSize at least %d, "+
			"or give the whole cluster a MaxPutSize of at most %d: %w",
			limit, from, n, maxBatch, 4*n, maxBatch-putOverhead, kdb.ErrInvalid)
	}
	if l, ok := log.(entrySizer); ok {
		if maxEntry := l.MaxEntrySize(); limit+entryOverhead > maxEntry {
			return fmt.Errorf("kvfsm: MaxPutSize %d (%s): the raft log entry of a put of that size takes up to %d bytes, over the log store's "+
				"MaxEntrySize %d: raft could not log such a put (its leader would step down instead of answering it); "+
				"give the whole cluster a MaxPutSize of at most %d: %w",
				limit, from, limit+entryOverhead, maxEntry, maxEntry-entryOverhead, kdb.ErrInvalid)
		}
	}
	return nil
}

// entrySizer is a raft.LogStore that says the largest encoded entry it
// stores: raftkdb.Store.
type entrySizer interface{ MaxEntrySize() int }

// entryOverhead bounds what the raft log entry of a put takes besides its
// key and value: the command's op byte and key length (a uvarint of at
// most kdb.MaxKeySize: 2 bytes), and what raftkdb's encoding adds to an
// entry's Data and Extensions, at most 43 bytes (see
// raftkdb.Store.MaxEntrySize).
const entryOverhead = 1 + 2 + 43

// A key's length takes at most 2 bytes of uvarint (entryOverhead): this
// constant does not compile if kdb.MaxKeySize grows past 16383.
const _ = uint(1<<14 - 1 - kdb.MaxKeySize)

// restoreDir is the directory, beside db's, where Restore imports a
// snapshot: the scratch store, and kdb.Import's temporary directory and
// lock, which Import keeps beside the store it builds. Restore removes it
// when it returns; Open removes what a Restore the process did not survive
// left there (up to a whole snapshot's copy).
func restoreDir(db *kdb.DB) string {
	return filepath.Join(filepath.Dir(db.Dir()), filepath.Base(db.Dir())+".restore")
}

// restoreMark is the file Restore puts in its directory (restoreDir)
// before anything else: only a directory holding it (or an empty one) is
// Restore's to remove. A directory of that name that is not (an operator's
// copy beside the store, say) is left alone, and Open and Restore refuse
// to go on.
const restoreMark = "KVFSM-RESTORE"

// removeRestoreDir removes dir, the directory of a Restore, unless it
// exists and is not Restore's (not empty, and no restoreMark in it): then
// it returns an error wrapping kdb.ErrInvalid.
//
// It removes everything but the mark first, then (once that is durable)
// the mark, then dir, so that a crash at any moment leaves dir marked,
// empty or gone: Restore's to remove. (os.RemoveAll takes the entries in
// the order the directory lists them: a crash after the mark went left an
// unmarked leftover that every later Open refused.)
func removeRestoreDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if _, lerr := os.Lstat(dir); lerr == nil {
			// A link to nothing: not Restore's (it makes a directory),
			// and its Mkdir would fail on it.
			return fmt.Errorf("kvfsm: %s is a symbolic link to nothing: Restore uses that path beside the store; move it away: %w", dir, kdb.ErrInvalid)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w (kvfsm's Restore uses that path: move it away)", err)
	}
	if len(ents) == 0 {
		return os.Remove(dir)
	}
	mark := filepath.Join(dir, restoreMark)
	if st, err := os.Lstat(mark); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("kvfsm: %s exists and is not a directory Restore made (it has no %s file): Restore uses that path beside the store; move it away: %w",
			dir, restoreMark, kdb.ErrInvalid)
	}
	for _, e := range ents {
		if e.Name() != restoreMark {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := vfs.OS.SyncDir(dir); err != nil {
		return err
	}
	if err := os.Remove(mark); err != nil {
		return err
	}
	return os.Remove(dir)
}

// makeRestoreDir creates dir, the directory of a Restore, with its mark,
// durable before anything else goes in.
func makeRestoreDir(dir string) error {
	if err := os.Mkdir(dir, 0o750); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, restoreMark), []byte("kvfsm's Restore: removed when it returns, or at the next Open\n"), 0o600); err != nil {
		return err
	}
	return vfs.OS.SyncDir(dir)
}

// readMeta returns the FSM's meta; maxPut is 0 when none is recorded (a
// store, or a snapshot, written before the limit was).
func readMeta(ns *kdb.Namespace) (applied, gen uint64, maxPut int, err error) {
	err = ns.View(func(s *kdb.Snapshot) error {
		var err error
		if applied, err = getU64(s, keyApplied); err != nil {
			return err
		}
		if gen, err = getU64(s, keyGen); err != nil {
			return err
		}
		v, err := s.Get(metaIndex, keyMaxPut)
		switch {
		case errors.Is(err, kdb.ErrNotFound):
			return nil
		case err != nil:
			return err
		case len(v) != 8:
			return fmt.Errorf("%w: kvfsm meta %q holds %d bytes", kdb.ErrCorrupt, keyMaxPut, len(v))
		}
		n := binary.BigEndian.Uint64(v)
		if n == 0 || n > kdb.MaxValueSize {
			return fmt.Errorf("%w: kvfsm meta %q holds %d, want 1 to %d", kdb.ErrCorrupt, keyMaxPut, n, kdb.MaxValueSize)
		}
		maxPut = int(n)
		return nil
	})
	return applied, gen, maxPut, err
}

func getU64(s *kdb.Snapshot, key []byte) (uint64, error) {
	v, err := s.Get(metaIndex, key)
	if errors.Is(err, kdb.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: kvfsm meta %q holds %d bytes", kdb.ErrCorrupt, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// putOverhead is what a put costs in a kdb batch besides its key and
// value, with room to spare: the operation's framing in the batch record
// and, for a value kept in the journal, its value record's header (see
// kdb.DB.MaxBatchSize).
const putOverhead = 96

// batchCost is the size Open, ApplyBatch and Restore count for a put whose
// key and value together are n bytes. A put whose cost is over
// db.MaxBatchSize fits no kdb batch of the store: Open refuses a store
// where a put of MaxPutSize costs more, and Restore a snapshot that holds
// one or whose MaxPutSize does.
func batchCost(n int) int { return n + putOverhead }

// putCost is batchCost of a put of key and value.
func putCost(key, value []byte) int { return batchCost(len(key) + len(value)) }

// keyText renders a key for an error message: quoted, and cut after 64
// bytes (a key may be up to kdb.MaxKeySize bytes of anything).
func keyText(k []byte) string {
	if len(k) <= 64 {
		return strconv.Quote(string(k))
	}
	return fmt.Sprintf("%q... (%d bytes)", k[:64], len(k))
}

// Applied returns the index of the last entry applied.
func (f *FSM) Applied() uint64 { return f.applied.Load() }

// Restores returns how many snapshots this FSM restored since Open.
func (f *FSM) Restores() uint64 { return f.restores.Load() }

// MaxPutSize returns the largest put (key and value) ApplyBatch applies:
// the cluster's limit, as recorded in the store (see Options.MaxPutSize).
func (f *FSM) MaxPutSize() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.maxPut
}

// Get returns the value of key, or kdb.ErrNotFound.
func (f *FSM) Get(key []byte) ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.ns.Get(dataIndex(f.gen), key)
}

// CatchUp prepares the FSM for a raft that starts with
// Config.NoSnapshotRestoreOnStart, and must be called before raft.NewRaft.
// Such a raft takes the newest snapshot in snaps as applied without
// restoring it and hands the FSM only the entries after it. That is right
// when the FSM's durable state is at least as new as the snapshot, the
// usual case (Snapshot makes the applies durable before raft records a
// snapshot); it is not when raft saved a snapshot that a leader installed
// and the node stopped before FSM.Restore (raft saves the snapshot first):
// the FSM would miss every entry up to the snapshot's index. CatchUp
// restores the newest snapshot in that case, so that the FSM covers it, and
// reports whether it did. A snapshot that fails to restore is an error: the
// node must not start.
//
// It also refuses (an error wrapping kdb.ErrInvalid) an FSM that has applied
// past both the end of raft's log (the log Open was given) and the newest
// snapshot: that log is not the one the FSM applied (another log store, or
// its files lost), raft would start it again from index 1, and ApplyBatch
// would skip every entry up to the applied index, acknowledged writes
// included.
//
// It refuses as well (kdb.ErrInvalid) a raft log that starts past the entry
// after the newest snapshot in snaps and ends past it: the entries in
// between are in neither (the newest snapshot, or every one, is missing
// from snaps: its files lost), and raft.NewRaft, which reads the log from
// that snapshot on, would panic ("log not found"). The error names the
// missing entries and the log's bounds: put the missing snapshot back, or
// remove the node's data and let it rejoin from the cluster.
func (f *FSM) CatchUp(snaps raft.SnapshotStore) (restored bool, err error) {
	f.UseSnapshots(snaps)
	metas, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("kvfsm: list snapshots: %w", err)
	}
	if err := f.checkLogReaches(metas); err != nil {
		return false, err
	}
	if err := f.checkLogStarts(metas); err != nil {
		return false, err
	}
	if len(metas) == 0 {
		return false, nil
	}
	m := metas[0] // newest first, the one raft takes
	if m.Index > f.Applied() {
		_, rc, err := snaps.Open(m.ID)
		if err != nil {
			return false, fmt.Errorf("kvfsm: snapshot %s (index %d) is ahead of the applied index %d and does not open: %w",
				m.ID, m.Index, f.Applied(), err)
		}
		if err := f.Restore(rc); err != nil {
			return false, fmt.Errorf("kvfsm: snapshot %s (index %d) is ahead of the applied index %d and does not restore: %w",
				m.ID, m.Index, f.Applied(), err)
		}
		restored = true
	}
	// Every command and configuration entry up to m.Index is in the state
	// now; raft skips the rest (no-ops, barriers) up to there.
	f.floor.Store(m.Index)
	return restored, nil
}

// checkLogReaches returns an error unless raft's log or the newest of
// metas reaches the applied index: raft logs an entry before the FSM
// applies it, and compacts only what a snapshot covers.
func (f *FSM) checkLogReaches(metas []*raft.SnapshotMeta) error {
	applied := f.Applied()
	if f.log == nil || applied == 0 {
		return nil
	}
	last, err := f.log.LastIndex()
	if err != nil {
		return fmt.Errorf("kvfsm: raft log's last index: %w", err)
	}
	var snap uint64
	if len(metas) > 0 {
		snap = metas[0].Index
	}
	if applied > max(last, snap) && snap > 0 {
		// A snapshot is taken while applies go on, so its content may be
		// a little ahead of the index raft names it by: an FSM restored
		// from it (a leader installed it) and stopped before its log got
		// the entries after that index is at the snapshot's own applied
		// index, past both, and consistent (raft resumes at the snapshot's
		// index; the FSM skips what it holds). A cluster test's follower,
		// killed right after such a Restore, was refused restart.
		v, err := f.ns.Get(metaIndex, keyRestored)
		if err != nil && !errors.Is(err, kdb.ErrNotFound) {
			return fmt.Errorf("kvfsm: read the restored index: %w", err)
		}
		if err == nil && len(v) == 8 && binary.BigEndian.Uint64(v) == applied {
			return nil
		}
	}
	if applied > max(last, snap) {
		return fmt.Errorf("kvfsm: the FSM has applied up to index %d, past the end of raft's log (last index %d) and its newest snapshot (index %d): "+
			"the log is not the one this FSM applied (another log store, or its files lost); raft would start it again and the FSM would skip "+
			"every entry up to %d, losing writes: start the node with the log store it ran with, or remove its data to rejoin from the cluster: %w",
			applied, last, snap, applied, kdb.ErrInvalid)
	}
	return nil
}

// checkLogStarts returns an error if raft's log leaves a hole after the
// newest of metas: raft.NewRaft reads every entry from the one after it to
// the log's last, and panics on one missing.
func (f *FSM) checkLogStarts(metas []*raft.SnapshotMeta) error {
	if f.log == nil {
		return nil
	}
	first, err := f.log.FirstIndex()
	if err != nil {
		return fmt.Errorf("kvfsm: raft log's first index: %w", err)
	}
	last, err := f.log.LastIndex()
	if err != nil {
		return fmt.Errorf("kvfsm: raft log's last index: %w", err)
	}
	var snap uint64
	newest := "no snapshot in raft's snapshot store"
	if len(metas) > 0 {
		snap = metas[0].Index
		newest = fmt.Sprintf("the newest snapshot in raft's snapshot store is %s (index %d)", metas[0].ID, snap)
	}
	if last <= snap || first <= snap+1 {
		return nil
	}
	return fmt.Errorf("kvfsm: raft's log holds entries %d..%d, and %s: entries %d..%d are in neither "+
		"(the snapshot that covered them is missing: raft compacts its log only behind a snapshot); raft cannot start from this "+
		"(it would panic reading entry %d): put the missing snapshot back in raft's snapshot store, or remove the node's data "+
		"(its store and its snapshots) to rejoin from the cluster: %w",
		first, last, newest, snap+1, first-1, snap+1, kdb.ErrInvalid)
}

// UseSnapshots tells the FSM raft's snapshot store (CatchUp does it);
// call it before raft.NewRaft. A snapshot covers every entry up to its
// index, while the applied index inside it is that of its last command:
// the no-ops and barriers after it, which raft never hands an FSM nor
// sends to a follower that installs the snapshot, are covered by the
// snapshot, not found in the log. Without it, a follower that installed a
// leader's snapshot found such a gap before its next entry, and panicked.
func (f *FSM) UseSnapshots(snaps raft.SnapshotStore) { f.snaps = snaps }

// checkGap returns an error unless every index from applied+1 to next-1 is
// covered by the newest snapshot (every snapshot that exists was taken from
// this FSM or restored into it before any later entry: raft saves an
// installed one and then restores it, and CatchUp restores one a stop
// interrupted) or is an entry that raft does not hand an FSM.
func (f *FSM) checkGap(applied, next uint64) error {
	covered := max(applied, f.floor.Load())
	if f.snaps != nil {
		metas, err := f.snaps.List()
		if err != nil {
			return fmt.Errorf("list snapshots: %w", err)
		}
		if len(metas) > 0 {
			covered = max(covered, metas[0].Index)
		}
	}
	from := covered + 1
	for i := from; i < next; i++ {
		if f.log == nil {
			return fmt.Errorf("entries %d..%d were never applied (no raft log to check what they were)", i, next-1)
		}
		var l raft.Log
		if err := f.log.GetLog(i, &l); err != nil {
			return fmt.Errorf("entry %d was never applied and is not in raft's log to tell what it was: %w", i, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return fmt.Errorf("entry %d (%s, term %d) was never applied", i, l.Type, l.Term)
		}
	}
	return nil
}

// Apply applies one entry.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies the entries in one transaction with the new applied
// index, or, when their writes are more than one kdb batch takes
// (db.MaxBatchSize; raft hands up to MaxAppendEntries commands, each up to
// the value size the service allows), in transactions committed in order,
// each with the applied index of its last entry, so that a crash leaves a
// prefix with its applied index. The response of each command is nil or
// its error; a put over MaxPutSize (key and value) is answered with an
// error wrapping kdb.ErrInvalid and applied as nothing, like a bad
// command: a decision of the entry and the cluster's limit alone, the same
// on every node (Open made sure this store's batches hold a put of
// MaxPutSize). Entries at or
// below the applied index are skipped. It panics (raft has no other way to
// be told, and the node must stop) if the first entry above the applied
// index leaves a hole after it (see FSM), or if the store fails.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resp := make([]any, len(logs))
	applied := f.applied.Load()
	for _, l := range logs {
		if l.Index <= applied {
			continue
		}
		if l.Index > applied+1 {
			if err := f.checkGap(applied, l.Index); err != nil {
				panic(fmt.Sprintf("kvfsm: hole before entry %d, applied index %d: %v", l.Index, applied, err))
			}
		}
		break
	}
	f.mu.RLock()
	data, maxPut := dataIndex(f.gen), f.maxPut
	f.mu.RUnlock()
	// Decode the commands and cut the entries into chunks of at most half
	// a kdb batch (an estimate with room: a value kept in the journal
	// costs its record header besides, see kdb.DB.MaxBatchSize).
	type cmd struct {
		i          int // in logs
		op         byte
		key, value []byte
	}
	type chunk struct {
		cmds []cmd
		last uint64 // the applied index once the chunk commits
	}
	limit := f.db.MaxBatchSize() / 2
	var chunks []chunk
	var cur chunk
	size := 0
	last := applied
	for i, l := range logs {
		if l.Index <= applied {
			continue // applied before a restart or inside a restored snapshot
		}
		last = max(last, l.Index)
		n := 0
		var c cmd
		if l.Type == raft.LogCommand {
			op, key, value, err := decode(l.Data)
			switch {
			case err != nil:
				resp[i] = err
			case len(key)+len(value) > maxPut:
				resp[i] = fmt.Errorf("kvfsm: entry %d: put of %d bytes (key and value), over the cluster's MaxPutSize (%d): nothing applied: %w",
					l.Index, len(key)+len(value), maxPut, kdb.ErrInvalid)
			default:
				c, n = cmd{i: i, op: op, key: key, value: value}, putCost(key, value)
			}
		}
		if n > 0 && len(cur.cmds) > 0 && size+n > limit {
			chunks, cur, size = append(chunks, cur), chunk{}, 0
		}
		if n > 0 {
			cur.cmds = append(cur.cmds, c)
			size += n
		}
		cur.last = last
	}
	if last == applied {
		return resp
	}
	chunks = append(chunks, cur)
	var commits []*kdb.Commit
	var err error
	for _, ch := range chunks {
		var c *kdb.Commit
		c, err = f.ns.Submit(func(tx *kdb.Txn) error {
			for _, c := range ch.cmds {
				var err error
				if c.op == opPut {
					err = tx.Put(data, c.key, c.value)
				} else {
					err = tx.Delete(data, c.key)
				}
				if err != nil {
					resp[c.i] = err
				}
			}
			tx.NoSync()
			return tx.Put(metaIndex, keyApplied, u64(ch.last))
		})
		if err != nil {
			break
		}
		commits = append(commits, c)
	}
	for _, c := range commits {
		if werr := c.Wait(); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		// The store failed: nothing more can be applied. raft has no way to
		// be told; panicking stops the node, whose restart replays the log.
		panic(fmt.Sprintf("kvfsm: apply of entries %d..%d: %v", logs[0].Index, logs[len(logs)-1].Index, err))
	}
	f.applied.Store(last)
	return resp
}

// Snapshot makes every apply durable and returns a snapshot that exports
// the store when raft persists it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	b := f.ns.NewBatch()
	b.Put(metaIndex, keySync, u64(f.applied.Load()))
	if err := f.db.Write(b); err != nil { // synced: every earlier NoSync apply is durable with it
		return nil, err
	}
	return snapshot{f.db}, nil
}

type snapshot struct{ db *kdb.DB }

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.db.Export(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}

// Restore replaces the FSM's state with the snapshot's. It imports the
// snapshot into a scratch store in DIR.restore, beside db's directory DIR,
// and removes that directory when it returns (Open removes it after a
// crash). The FSM adopts the snapshot's MaxPutSize (the cluster's limit,
// recorded by the node it came from), recording it with the new state; a
// snapshot without one (from a node that predates the limit) leaves this
// FSM's. A snapshot that does not import (damaged: kdb.ErrCorrupt), whose
// MaxPutSize this store's batches or raft log cannot hold (kdb.ErrInvalid,
// naming both figures, as Open would refuse the store with that limit) or
// that holds a
// value over what one kdb batch of this store takes (kdb.ErrInvalid,
// naming the key and the sizes; see "Sizes" in the package doc) is refused
// before anything of the FSM's state is written. On return (nil) the new
// state is durable.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	work := restoreDir(f.db)
	if err := removeRestoreDir(work); err != nil {
		return err
	}
	if err := makeRestoreDir(work); err != nil {
		return fmt.Errorf("kvfsm: Restore: %w", err)
	}
	defer removeRestoreDir(work)
	scratch := filepath.Join(work, "snapshot")
	if _, err := kdb.Import(scratch, rc, nil); err != nil {
		return fmt.Errorf("kvfsm: import of the snapshot: %w", err)
	}
	src, err := kdb.Open(scratch, &kdb.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer src.Close()
	sns, err := src.Namespace(Namespace)
	if err != nil {
		return err
	}
	applied, srcGen, srcMaxPut, err := readMeta(sns)
	if err != nil {
		return fmt.Errorf("kvfsm: the snapshot's FSM state: %w", err)
	}
	// The snapshot's MaxPutSize is the cluster's: this FSM adopts it, so
	// that it applies the entries after the snapshot as the node it came
	// from does. A store (or raft log) that cannot hold a put of that size
	// refuses the snapshot, as Open would refuse it with that limit.
	if srcMaxPut != 0 {
		if err := fits(f.db, f.log, srcMaxPut, "the snapshot's"); err != nil {
			return fmt.Errorf("kvfsm: snapshot at applied index %d: nothing restored: %w", applied, err)
		}
	}
	// Every value must fit a kdb batch of this store before anything is
	// written: a store that could not have applied a put of the leader's
	// log (a snapshot from a leader whose store had larger batches and no
	// recorded limit, or whose values predate it) refuses the snapshot
	// whole, naming the key, and keeps its state.
	maxBatch := f.db.MaxBatchSize()
	err = sns.View(func(s *kdb.Snapshot) error {
		it := s.Iter(dataIndex(srcGen))
		for ok := it.First(); ok; ok = it.Next() {
			if n := putCost(it.Key(), it.Value()); n > maxBatch {
				return fmt.Errorf("kvfsm: snapshot at applied index %d: key %s holds a value of %d bytes, a put of %d with its key and framing, "+
					"over what one kdb batch of this store takes (%d, a quarter of its SegmentSize): this store could not have applied it "+
					"(every node's store needs the leader's SegmentSize; this one at least %d): nothing restored: %w",
					applied, keyText(it.Key()), len(it.Value()), n, maxBatch, 4*n, kdb.ErrInvalid)
			}
		}
		return it.Err()
	})
	if err != nil {
		return err
	}
	f.mu.RLock()
	old := f.gen
	f.mu.RUnlock()
	gen := old + 1
	dst := dataIndex(gen)
	limit := maxBatch / 2
	b := f.ns.NewBatch()
	b.DropIndex(dst) // a leftover of a Restore that crashed
	size := 0
	err = sns.View(func(s *kdb.Snapshot) error {
		it := s.Iter(dataIndex(srcGen))
		for ok := it.First(); ok; ok = it.Next() {
			n := putCost(it.Key(), it.Value())
			if size+n > limit && b.Len() > 0 {
				if err := f.db.Write(b); err != nil {
					return err
				}
				b, size = f.ns.NewBatch(), 0
			}
			b.Put(dst, it.Key(), it.Value())
			size += n
		}
		return it.Err()
	})
	if err != nil {
		return err
	}
	if b.Len() > 0 {
		if err := f.db.Write(b); err != nil {
			return err
		}
	}
	// The switch: one atomic, synced write.
	b = f.ns.NewBatch()
	b.Put(metaIndex, keyGen, u64(gen))
	b.Put(metaIndex, keyApplied, u64(applied))
	b.Put(metaIndex, keyRestored, u64(applied))
	if srcMaxPut != 0 {
		b.Put(metaIndex, keyMaxPut, u64(uint64(srcMaxPut)))
	}
	b.DropIndex(dataIndex(old))
	f.mu.Lock()
	err = f.db.Write(b)
	if err == nil {
		f.gen = gen
		f.applied.Store(applied)
		if srcMaxPut != 0 {
			f.maxPut = srcMaxPut
		}
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	f.restores.Add(1)
	return nil
}

// All calls fn for every key and value, in key order, from one consistent
// View of db (open or reopened after the node stopped). It returns the
// applied index of that state.
func All(db *kdb.DB, fn func(key, value []byte) error) (applied uint64, err error) {
	ns, err := db.Namespace(Namespace)
	if err != nil {
		return 0, err
	}
	err = ns.View(func(s *kdb.Snapshot) error {
		a, err := getU64(s, keyApplied)
		if err != nil {
			return err
		}
		gen, err := getU64(s, keyGen)
		if err != nil {
			return err
		}
		applied = a
		it := s.Iter(dataIndex(gen))
		for k, v := range it.All() {
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return it.Err()
	})
	return applied, err
}
