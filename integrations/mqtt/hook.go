package kdbmqtt

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdb-project/kdb"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"
)

// Options configures the hook (the config argument of Server.AddHook).
type Options struct {
	// DB is the store, opened by the caller (who closes it after the
	// server stopped: Stop does not close it). Required.
	DB *kdb.DB
	// Server is the server the hook is added to. Required: at OnStarted
	// the hook publishes through it again the messages it acknowledged
	// and had not yet handed to their subscribers when the process
	// stopped (see doc.go).
	Server *mqtt.Server
}

// pendingT is the T of a pending-publish record (storage's keys are
// "CL", "SUB", "RET", "IFM", "SYS").
const pendingT = "PUB"

// Tags the hook puts in Packet.Connect.ClientIdentifier of a PUBLISH
// (a field no PUBLISH uses, copied by Packet.Copy to every subscriber's
// copy), to know which OnQosPublish events belong to which publish.
const (
	tagPrefix    = "kdbmqtt:"
	replayPrefix = "kdbmqtt-replay:"
)

// Hook is a mochi-mqtt storage hook on a kdb store. See doc.go.
type Hook struct {
	mqtt.HookBase

	db  *kdb.DB
	ns  *kdb.Namespace
	srv *mqtt.Server

	// budget bounds the cost (opCost) of one commit: the store's
	// MaxBatchSize, read at Init. A commit within it is never refused by
	// the store for its size (see opCost).
	budget int

	waiters sync.WaitGroup // one per commit submitted, until it is waited for
	// failed is the store's failure (a commit the store did not make: I/O,
	// fsync, the handle closed), set once; from then on every write is
	// refused, and with it every acknowledgement that depends on one. A
	// write the store refuses for its input (kdb.ErrInvalid: too large) is
	// refused for its own client or message only (errRefused) and never
	// sets it.
	failed  atomic.Pointer[error]
	skipped atomic.Int64 // malformed records skipped at load

	mu struct {
		sync.Mutex
		stopped bool
		seq     uint64                        // last pending-publish sequence
		last    map[string]ackDep             // client → what its next ack must wait for
		flights map[string]map[uint16]*flight // client → packet ID → what is stored
		active  map[string]*publish           // tag → publish whose fan-out is being gathered
		open    map[string]*publish           // publishing client → its publish in progress
		// dels are inflight removals not yet submitted: the next commit
		// carries them (first), or a timer within delFlush.
		dels     [][]byte
		delTimer bool
		// ended holds the client keys of the sessions OnDisconnect ended
		// (their client record removed) before StoredInflightMessages: at
		// a start mochi loads the clients and ends those whose session
		// ends with its connection before it loads their subscriptions
		// and inflight messages, which the hook then removes instead
		// (orphan). nil from StoredInflightMessages or OnStarted on.
		ended map[string]bool
		// badClients holds the keys of the client records StoredClients
		// skipped (malformed, damaged): their subscriptions and inflight
		// messages are not handed out (mochi would put the subscriptions
		// in its topic tree with no session), and StoredInflightMessages
		// removes them with the record (dropBadClients).
		badClients map[string]bool
		// conns holds, per client ID, the connection whose session
		// record was stored last (OnSessionEstablish) and the session
		// expiry interval stored, until that connection's OnDisconnect.
		conns map[string]conn
		// resuming holds, per client ID, the connection resuming a
		// stored session from its OnSessionEstablish to its
		// OnSessionEstablished (awaitResume).
		resuming map[string]*resume
	}

	// loaded at Init, handed out by the Stored* events and OnStarted.
	loadedInflight []storage.Message
	replay         []pendingMsg
	// replayed is closed when OnStarted has published the pending
	// messages again (at Init if there are none): mochi accepts
	// connections before OnStarted, and a session resumed while the
	// replay hands it a message would leave that message on the old
	// client object, which the new one was cloned from.
	replayed chan struct{}
}

// ackDep is what a client's next acknowledgement waits for: the last
// commit written on its behalf, or the error of a write that was not made
// (sticky until that acknowledgement is refused: a later write that
// succeeds does not make up for it).
type ackDep struct {
	c   *kdb.Commit
	err error
}

// flight is what the store holds for one packet ID of a client.
type flight struct {
	kind    byte        // packets.Publish, Pubrec or Pubrel
	created int64       // the packet's Created (mochi orders resends by it)
	commit  *kdb.Commit // the write of its current state (nil while pub is set)
	err     error       // the write of its current state failed (commit is nil)
	pub     *publish    // the publish whose fan-out commit will write it
	noSync  bool        // commit is a fan-out's, not waited durable (see gate)
	// unstored: a fan-out's copy the store refused for its size
	// (dropCopyLocked). Nothing of it is stored, but it is kept so that
	// gate holds it until the fan-out's last commit (and, for QoS 2, a
	// sync), like the stored copies: sent before, a crash would publish
	// the pending message again and deliver it twice.
	unstored bool
}

// publish is one PUBLISH of QoS 1 or 2 between OnPublish and the commit of
// its fan-out (OnPublished).
type publish struct {
	tag    string
	seq    uint64
	client string
	pid    uint16
	qos    byte
	replay bool
	puts   []fanout
	// retTopic is the topic whose retained record OnPublish wrote (a
	// reference to this publish, or a removal) in the commit of the
	// pending record, if it did; retSeen is set when OnRetainMessage
	// came for this publish (and stored the server's retained message).
	retTopic string
	retWrote bool
	retSeen  bool
	ready    chan struct{} // closed once commit or err is set
	commit   *kdb.Commit   // the fan-out's last commit (see commitFanoutLocked)
	err      error         // the fan-out was not written: the store failed
}

type fanout struct {
	client string
	pid    uint16
	f      *flight
	val    []byte
}

// conn is a connection whose session record the hook stored, with the
// session expiry interval it stored.
type conn struct {
	cl     *mqtt.Client
	expiry uint32
}

// resume is a connection resuming a session; done is closed when mochi
// has put it in its client map in place of the old client object (or it
// is given up: awaitResume).
type resume struct {
	cl   *mqtt.Client
	done chan struct{}
}

type pendingMsg struct {
	seq uint64
	msg storage.Message
}

// ID returns the hook's ID.
func (h *Hook) ID() string { return "kdb" }

// Provides reports the events the hook handles.
func (h *Hook) Provides(b byte) bool {
	return bytes.Contains([]byte{
		mqtt.OnStarted,
		mqtt.OnSessionEstablish,
		mqtt.OnSessionEstablished,
		mqtt.OnDisconnect,
		mqtt.OnSubscribed,
		mqtt.OnUnsubscribed,
		mqtt.OnPublish,
		mqtt.OnPublished,
		mqtt.OnPacketProcessed,
		mqtt.OnPacketEncode,
		mqtt.OnRetainMessage,
		mqtt.OnWillSent,
		mqtt.OnQosPublish,
		mqtt.OnQosComplete,
		mqtt.OnQosDropped,
		mqtt.OnSysInfoTick,
		mqtt.OnClientExpired,
		mqtt.OnRetainedExpired,
		mqtt.StoredClients,
		mqtt.StoredInflightMessages,
		mqtt.StoredRetainedMessages,
		mqtt.StoredSubscriptions,
		mqtt.StoredSysInfo,
	}, []byte{b})
}

// Init opens the hook's namespace and reads what the server will ask for.
// One hook at a time per store: Init on a store whose hook has not
// stopped returns an error wrapping kdb.ErrInvalid (each hook numbers its
// pending publishes and knows what is stored from its own memory, so two
// would overwrite each other's records).
func (h *Hook) Init(config any) error {
	o, ok := config.(*Options)
	if !ok || o == nil {
		return mqtt.ErrInvalidConfigType
	}
	if o.DB == nil || o.Server == nil {
		return errors.New("kdbmqtt: Options.DB and Options.Server are required")
	}
	ns, err := o.DB.Namespace(Namespace)
	if err != nil {
		return fmt.Errorf("kdbmqtt: %w", err)
	}
	claims.Lock()
	defer claims.Unlock()
	if claims.m[o.DB] != nil {
		return fmt.Errorf("kdbmqtt: namespace %q of this kdb store has a hook already (stop its server first): %w", Namespace, kdb.ErrInvalid)
	}
	h.db, h.ns, h.srv = o.DB, ns, o.Server
	h.budget = o.DB.MaxBatchSize()
	h.mu.last = map[string]ackDep{}
	h.mu.flights = map[string]map[uint16]*flight{}
	h.mu.active = map[string]*publish{}
	h.mu.open = map[string]*publish{}
	h.mu.ended = map[string]bool{}
	h.mu.conns = map[string]conn{}
	h.mu.resuming = map[string]*resume{}
	h.replayed = make(chan struct{})
	if err := h.load(); err != nil {
		return err
	}
	if len(h.replay) == 0 {
		close(h.replayed)
	}
	if claims.m == nil {
		claims.m = map[*kdb.DB]*Hook{}
	}
	claims.m[o.DB] = h
	return nil
}

// claims holds the kdb stores that have a live hook (Init's check; Stop
// releases). A hook never stopped keeps its entry, and so its kdb.DB, for
// the life of the process.
var claims struct {
	sync.Mutex
	m map[*kdb.DB]*Hook
}

// load reads the inflight messages and pending publishes, to know what is
// stored and what to publish again. It first undoes the fan-outs a stop
// interrupted (commitFanoutLocked): the copies named by the fan-out records
// of a pending publish still stored are removed, with those records,
// before anything is handed to the server; the message is then published
// again to every subscriber.
func (h *Hook) load() error {
	type fanRec struct {
		key  []byte
		seq  uint64
		keys [][]byte
	}
	var maxSeq uint64
	var fans []fanRec
	var badFans [][]byte         // fan-out records skipped
	var retain []storage.Message // pending publishes still retained by reference
	pending := map[uint64]bool{}
	undo := map[string]bool{} // inflight keys of interrupted fan-outs
	err := h.ns.View(func(s *kdb.Snapshot) error {
		if err := h.scanBad(s, idxFanout, func(k, v []byte) error {
			if len(k) != fanKeyLen {
				return fmt.Errorf("%w: fan-out key of %d bytes", errMalformed, len(k))
			}
			seq := beUint64(k[:8])
			maxSeq = max(maxSeq, seq)
			keys, err := decodeKeyList(v)
			if err != nil {
				return err
			}
			fans = append(fans, fanRec{key: bytes.Clone(k), seq: seq, keys: keys})
			return nil
		}, func(k []byte) { badFans = append(badFans, k) }); err != nil {
			return err
		}
		if err := h.scan(s, idxPending, func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("%w: pending-publish key of %d bytes", errMalformed, len(k))
			}
			m, err := decodeMessage(v, "pending publish")
			if err != nil {
				return err
			}
			if m.Client == "" || m.TopicName == "" || m.FixedHeader.Qos == 0 || m.PacketID == 0 {
				return fmt.Errorf("%w: pending publish client=%q topic=%q qos=%d packet=%d", errMalformed, m.Client, m.TopicName, m.FixedHeader.Qos, m.PacketID)
			}
			seq := beUint64(k)
			maxSeq = max(maxSeq, seq)
			pending[seq] = true
			h.replay = append(h.replay, pendingMsg{seq: seq, msg: m})
			if m.FixedHeader.Retain && len(m.Payload) > 0 {
				if v, err := s.Get(idxRetained, retainedKey(m.TopicName)); err == nil {
					if ref, ok := decodeRetainedRef(v); ok && ref == seq {
						retain = append(retain, m)
					}
				}
			}
			return nil
		}); err != nil {
			return err
		}
		for _, f := range fans {
			if pending[f.seq] {
				for _, k := range f.keys {
					undo[string(k)] = true
				}
			}
		}
		return h.scan(s, idxInflight, func(k, v []byte) error {
			if undo[string(k)] {
				return nil
			}
			m, err := decodeMessage(v, "inflight")
			if err != nil {
				return err
			}
			if m.Client == "" || m.PacketID == 0 || !bytes.Equal(k, inflightKey(m.Client, m.PacketID)) {
				return fmt.Errorf("%w: inflight record for client %q packet %d under another key", errMalformed, m.Client, m.PacketID)
			}
			switch m.FixedHeader.Type {
			case packets.Publish, packets.Pubrec, packets.Pubrel:
			default:
				return fmt.Errorf("%w: inflight record of packet type %d", errMalformed, m.FixedHeader.Type)
			}
			h.flightsOf(m.Client)[m.PacketID] = &flight{kind: m.FixedHeader.Type, created: m.Created}
			h.loadedInflight = append(h.loadedInflight, m)
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("kdbmqtt: loading the store: %w", err)
	}
	// One transaction per fan-out record: its keys were one commit's.
	undone := 0
	for _, f := range fans {
		err := h.ns.Update(func(tx *kdb.Txn) error {
			if pending[f.seq] {
				for _, k := range f.keys {
					if err := tx.Delete(idxInflight, k); err != nil {
						return err
					}
				}
			}
			return tx.Delete(idxFanout, f.key)
		})
		if err != nil {
			return fmt.Errorf("kdbmqtt: undoing an interrupted fan-out: %w", err)
		}
		if pending[f.seq] {
			undone += len(f.keys)
		}
	}
	if undone > 0 {
		h.Log.Info("kdbmqtt: removed the copies of fan-outs a stop interrupted; their messages are published again", "copies", undone)
	}
	if err := h.dropBadFanouts(badFans, pending); err != nil {
		return err
	}
	// A retained publish's reference a stop left (between its pending
	// record's commit and OnRetainMessage's): its message is retained.
	for _, m := range retain {
		m.T, m.FixedHeader.Dup = storage.RetainedKey, false
		key, val := retainedKey(m.TopicName), encodeMessage(&m)
		if err := h.ns.Update(func(tx *kdb.Txn) error { return tx.Put(idxRetained, key, val) }); err != nil {
			return fmt.Errorf("kdbmqtt: retaining a pending publish: %w", err)
		}
	}
	if len(retain) > 0 {
		h.Log.Info("kdbmqtt: retained the retained publishes a stop interrupted; they are published again", "messages", len(retain))
	}
	h.mu.seq = maxSeq
	return nil
}

// dropBadFanouts removes the fan-out records load skipped, whose keys are
// bad, in one synced commit. A fan-out record is of use only while the pending publish it
// belongs to is stored, to undo the copies it names; one that cannot be
// read is of no use at all, and stayed stored for good. If its pending
// publish is stored (pending), the copies it named cannot be told from
// the other inflight messages and are kept: the message is published
// again, and the subscribers of that part may get it twice (a QoS 2
// message too). That is logged, at error level, with the publish's
// sequence; removing inflight messages that merely look like the copies
// could lose an acknowledged message, a duplicate loses nothing.
func (h *Hook) dropBadFanouts(bad [][]byte, pending map[uint64]bool) error {
	if len(bad) == 0 {
		return nil
	}
	for _, k := range bad {
		if len(k) == fanKeyLen && pending[beUint64(k[:8])] {
			h.Log.Error("kdbmqtt: a fan-out record of a message to publish again cannot be read: the copies it named are kept, and their subscribers may get the message twice",
				"seq", beUint64(k[:8]), "part", beUint64(k[8:]))
		}
	}
	err := h.ns.Update(func(tx *kdb.Txn) error {
		for _, k := range bad {
			if err := tx.Delete(idxFanout, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kdbmqtt: removing fan-out records that cannot be read: %w", err)
	}
	h.Log.Warn("kdbmqtt: removed fan-out records that could not be read", "records", len(bad))
	return nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// scan calls fn for every record of an index. A record fn rejects (it
// returns an error wrapping errMalformed) or whose value cannot be read
// (kdb.ErrCorrupt) is logged and skipped; any other error ends the scan.
func (h *Hook) scan(s *kdb.Snapshot, index string, fn func(k, v []byte) error) error {
	return h.scanBad(s, index, fn, nil)
}

// scanBad is scan, and calls bad (if not nil) with the key of each record
// it skips (a copy).
func (h *Hook) scanBad(s *kdb.Snapshot, index string, fn func(k, v []byte) error, bad func(k []byte)) error {
	it := s.Iter(index)
	ok := it.First()
	for ok {
		k := it.Key() // valid until it moves; fn keeps neither k nor v
		v := it.Value()
		if err := it.Err(); err != nil {
			if !errors.Is(err, kdb.ErrCorrupt) {
				return err
			}
			h.skip(index, k, err)
			if bad != nil {
				bad(bytes.Clone(k))
			}
			// Err is sticky: go on with a fresh iterator after k.
			next := append(bytes.Clone(k), 0)
			it = s.Iter(index)
			ok = it.Seek(next)
			continue
		}
		if err := fn(k, v); err != nil {
			if !errors.Is(err, errMalformed) {
				return err
			}
			h.skip(index, k, err)
			if bad != nil {
				bad(bytes.Clone(k))
			}
		}
		ok = it.Next()
	}
	return it.Err()
}

func (h *Hook) skip(index string, key []byte, err error) {
	h.skipped.Add(1)
	if index == idxClients {
		h.mu.Lock()
		if h.mu.badClients == nil {
			h.mu.badClients = map[string]bool{}
		}
		h.mu.badClients[string(key)] = true
		h.mu.Unlock()
	}
	h.Log.Error("kdbmqtt: skipping a malformed stored record", "index", Namespace+"/"+index, "key", string(key), "error", err)
}

// Skipped returns how many malformed records the hook skipped so far.
func (h *Hook) Skipped() int64 { return h.skipped.Load() }

// Stop waits for the commits in flight. The store stays open. It returns
// the store's failure if a write failed (Err), so that the process that
// runs the server can report it (mochi's Server.Close only logs it).
func (h *Hook) Stop() error {
	h.mu.Lock()
	if len(h.mu.dels) > 0 {
		_, _ = h.submitLocked(true, 0, nil)
	}
	h.mu.stopped = true
	h.mu.Unlock()
	h.waiters.Wait()
	claims.Lock()
	if claims.m[h.db] == h {
		delete(claims.m, h.db)
	}
	claims.Unlock()
	return h.Err()
}

// Err returns the store failure that made the hook refuse every
// acknowledgement that depends on a write (see doc.go), or nil. A write
// refused for its size is not such a failure.
func (h *Hook) Err() error {
	if p := h.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *Hook) fail(err error) {
	if h.failed.CompareAndSwap(nil, &err) {
		h.Log.Error("kdbmqtt: a store write failed: acknowledgements are refused from now on", "error", err)
	}
}

func (h *Hook) flightsOf(client string) map[uint16]*flight {
	fl := h.mu.flights[client]
	if fl == nil {
		fl = map[uint16]*flight{}
		h.mu.flights[client] = fl
	}
	return fl
}

// errRefused marks a write the store refused for its input
// (kdb.ErrInvalid: a value or batch too large), which the hook refuses for
// its own client or message only.
var errRefused = errors.New("kdbmqtt: the store refused the write")

// errStopped is the error of a write after Stop.
var errStopped = errors.New("kdbmqtt: write after the hook stopped")

// opOverhead is what opCost adds to each operation's key and value: the
// operation's framing in the batch record (kind, tree name, lengths: under
// 40 bytes) and, for a value kept in the journal, its record's 64 bytes
// counted by kdb's group bound.
const opOverhead = 128

// opCost is what one Put (or Delete: value 0) counts against h.budget. A
// commit whose operations cost at most DB.MaxBatchSize() in all fits
// every bound of kdb's (DB.encode): its batch record and each value record
// are at most MaxBatchSize, and the whole, at most MaxBatchSize plus a
// few bytes, is within the group bound, which is at least twice
// MaxBatchSize (SegmentSize/2 against min(16 MiB, SegmentSize/4)).
func opCost(key, val int) int { return key + val + opOverhead }

// fitsAlone reports whether a Put of a value of val bytes under a key of
// key bytes can be stored in a commit of its own.
func (h *Hook) fitsAlone(key, val int) bool {
	return val <= kdb.MaxValueSize && opCost(key, val) <= h.budget
}

// submitLocked queues fn as an ordered commit (kdb's Submit: commits share
// fsyncs and take effect in submission order) and starts the goroutine
// that waits for it, as every Commit must be waited for. cost is the sum
// of opCost of fn's writes; the inflight removals waiting for a commit
// (h.mu.dels) go first in it, those that do not fit h.budget beside fn in
// commits of their own before it, each within h.budget (a clean start
// that drops thousands of a session's inflight messages queues more
// removals than one commit takes). Called with h.mu held, so that
// submission order is the order of the events. Does not wait for the
// commit.
//
// The error is the store's failure (the hook fails: Err), errStopped, or
// errRefused when the store refused fn's writes for their size
// (kdb.ErrInvalid on a healthy handle): that one write is not made and the
// hook goes on.
func (h *Hook) submitLocked(noSync bool, cost int, fn func(tx *kdb.Txn) error) (*kdb.Commit, error) {
	if h.mu.stopped {
		h.Log.Warn("kdbmqtt: write after Stop ignored")
		return nil, errStopped
	}
	if err := h.Err(); err != nil {
		return nil, err
	}
	dels := h.mu.dels
	h.mu.dels = nil
	for len(dels) > 0 {
		n, dcost := 0, 0
		for n < len(dels) && dcost+opCost(len(dels[n]), 0) <= h.budget {
			dcost += opCost(len(dels[n]), 0)
			n++
		}
		if n == len(dels) && (fn == nil || dcost+cost <= h.budget) {
			break // the rest go first in fn's commit
		}
		n = max(n, 1)
		if _, err := h.commitLocked(true, dels[:n], nil); err != nil {
			if !errors.Is(err, errRefused) {
				return nil, err
			}
			// Not expected (each removal is a key, within h.budget):
			// the records stay, and their messages are sent again
			// after a restart, as a lost removal's are.
			h.Log.Error("kdbmqtt: inflight removals refused by the store; not removed", "removals", n, "error", err)
		}
		dels = dels[n:]
	}
	c, err := h.commitLocked(noSync, dels, fn)
	if errors.Is(err, errRefused) {
		// Nothing was written: the removals wait for the next commit.
		h.mu.dels = append(dels, h.mu.dels...)
	}
	return c, err
}

// commitLocked submits one commit of the removals dels and fn (if not
// nil), and starts the goroutine that waits for it. The error is the
// store's failure (the hook fails) or errRefused (the store refused the
// commit for its size: nothing of it is written).
//
// The caller must hold h.mu.
func (h *Hook) commitLocked(noSync bool, dels [][]byte, fn func(tx *kdb.Txn) error) (*kdb.Commit, error) {
	c, err := h.ns.Submit(func(tx *kdb.Txn) error {
		if noSync {
			tx.NoSync()
		}
		for _, k := range dels {
			if err := tx.Delete(idxInflight, k); err != nil {
				return err
			}
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
	if err != nil {
		if errors.Is(err, kdb.ErrInvalid) && h.db.Err() == nil {
			return nil, fmt.Errorf("%w: %w", errRefused, err)
		}
		h.fail(err)
		return nil, err
	}
	h.waiters.Add(1)
	go func() {
		defer h.waiters.Done()
		if err := c.Wait(); err != nil {
			h.fail(err)
		}
	}()
	return c, nil
}

// kvOp is one write of a commit that submitOpsLocked may split.
type kvOp struct {
	index    string
	key, val []byte
	del      bool
}

// submitOpsLocked submits ops, in order, in as many commits as it takes
// for each to fit h.budget, and returns the last one (commits take effect
// in submission order: once it is durable, so is every one before it). A
// crash between them keeps a prefix of ops. It stops at the first error,
// some commits submitted: the caller refuses the ack that waits for them.
//
// The caller must hold h.mu.
func (h *Hook) submitOpsLocked(noSync bool, ops []kvOp) (*kdb.Commit, error) {
	var last *kdb.Commit
	for len(ops) > 0 {
		n, cost := 0, 0
		for n < len(ops) {
			c := opCost(len(ops[n].key), len(ops[n].val))
			if n > 0 && cost+c > h.budget {
				break
			}
			cost += c
			n++
		}
		part := ops[:n]
		ops = ops[n:]
		c, err := h.submitLocked(noSync, cost, func(tx *kdb.Txn) error {
			for _, o := range part {
				var err error
				if o.del {
					err = tx.Delete(o.index, o.key)
				} else {
					err = tx.Put(o.index, o.key, o.val)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		last = c
	}
	return last, nil
}

// refuse closes cl's connection, so that the acknowledgement being written
// is never sent, and logs why.
func (h *Hook) refuse(cl *mqtt.Client, err error) {
	if errors.Is(err, errRefused) {
		h.Log.Warn("kdbmqtt: not acknowledging: the store refused the write (too large); closing the connection", "client", cl.ID, "error", err)
	} else {
		h.Log.Error("kdbmqtt: not acknowledging: the store write failed; closing the connection", "client", cl.ID, "error", err)
	}
	cl.Stop(err)
}

// wait waits for c; false (after closing the client's connection, so that
// what follows is never sent) if it failed, or if c is nil and missing is
// set (the write was not queued; why, if known, in werr).
func (h *Hook) wait(cl *mqtt.Client, c *kdb.Commit, missing bool, werr error) bool {
	var err error
	if c != nil {
		err = c.Wait()
	} else if missing {
		err = werr
		if err == nil {
			err = h.Err()
		}
		if err == nil {
			err = errors.New("kdbmqtt: the write was not queued")
		}
	}
	if err != nil {
		h.refuse(cl, err)
		return false
	}
	return true
}

// setLast records what client's next ack waits for: c, or err if the
// write was not made (which sticks until that ack is refused).
func (h *Hook) setLast(client string, c *kdb.Commit, err error) {
	switch d := h.mu.last[client]; {
	case d.err != nil:
	case err != nil:
		h.mu.last[client] = ackDep{err: err}
	case c != nil:
		h.mu.last[client] = ackDep{c: c}
	}
}

// barrier waits until everything written on behalf of cl so far is
// durable; false (the connection closed) if a write of it failed or was
// not made.
func (h *Hook) barrier(cl *mqtt.Client) bool {
	h.mu.Lock()
	d := h.mu.last[cl.ID]
	if d.err != nil {
		delete(h.mu.last, cl.ID)
	}
	h.mu.Unlock()
	if d.err != nil {
		h.refuse(cl, d.err)
		return false
	}
	if d.c == nil {
		return true
	}
	if !h.wait(cl, d.c, false, nil) {
		return false
	}
	h.mu.Lock()
	if h.mu.last[cl.ID].c == d.c {
		delete(h.mu.last, cl.ID)
	}
	h.mu.Unlock()
	return true
}

// OnSessionEstablish stores the client before its CONNACK is sent. It
// also turns off topic aliases from the server to this client: mochi then
// sends a PUBLISH with an alias and no topic, and a message stored that
// way could not be sent again on the next connection, where the alias
// means nothing (mochi's own hooks store it so).
//
// A connection that starts a new session over a stored one (clean start,
// or an MQTT 3.1.1 clean session: mochi's inheritClientSession then
// discards the old one) removes the old session's subscriptions and
// inflight messages in the commit of its client record, which its CONNACK
// waits for. mochi reports the discarded inflight messages as dropped
// (OnQosDropped) after this event, whose removals are not synced: the
// CONNACK went out before them, and a crash then handed the old session's
// messages to the new one after the restart.
//
// A connection made while OnStarted publishes the pending messages again
// waits here until it is done. A connection that resumes a session also
// waits for the fan-outs in progress (awaitFanouts), and holds the
// publishes to it that come after until OnSessionEstablished
// (awaitResume).
func (h *Hook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	<-h.replayed
	old, ok := h.srv.Clients.Get(cl.ID)
	if ok && !pk.Connect.Clean {
		h.mu.Lock()
		if r := h.mu.resuming[cl.ID]; r != nil {
			close(r.done)
		}
		h.mu.resuming[cl.ID] = &resume{cl: cl, done: make(chan struct{})}
		h.mu.Unlock()
		h.awaitFanouts(cl.ID)
	}
	reset := ok && (pk.Connect.Clean || (old.Properties.Clean && old.Properties.ProtocolVersion < 5))
	cl.Properties.Props.TopicAliasMaximum = 0
	h.storeClient(cl, reset, true)
}

// OnSessionEstablished ends the wait of the publishes to cl's session
// (awaitResume): mochi has put cl in its client map and sent its CONNACK
// and the session's inflight messages.
func (h *Hook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) { h.endResume(cl, nil) }

// endResume ends the resume of cl's session, if r (any if nil) is it.
func (h *Hook) endResume(cl *mqtt.Client, r *resume) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.mu.resuming[cl.ID]; cur != nil && cur.cl == cl && (r == nil || cur == r) {
		close(cur.done)
		delete(h.mu.resuming, cl.ID)
	}
}

// resumingSubscriberLocked returns the resume of a session that
// subscribes to topic, if any.
//
// The caller must hold h.mu.
func (h *Hook) resumingSubscriberLocked(topic string) *resume {
	if len(h.mu.resuming) == 0 {
		return nil
	}
	subs := h.srv.Topics.Subscribers(topic)
	for id := range subs.Subscriptions {
		if r := h.mu.resuming[id]; r != nil {
			return r
		}
	}
	for _, group := range subs.Shared {
		for id := range group {
			if r := h.mu.resuming[id]; r != nil {
				return r
			}
		}
	}
	return nil
}

// awaitResume waits until r's connection is in mochi's client map
// (OnSessionEstablished), closed, or fanoutWait passed (then it gives r
// up: a CONNACK or resend that failed calls no event). A publish
// acknowledged while a session is being resumed (after awaitFanouts) had
// its fan-out take the old client object from mochi's map and set the
// message inflight on it after mochi cloned that object into the new one:
// the message was never sent (nor stored under a packet ID of the new
// connection's, which could take it). OnPublish waits here first, before
// it stores the message and so before the PUBACK, for a publish to a
// session being resumed.
func (h *Hook) awaitResume(r *resume) {
	t := time.NewTimer(fanoutWait)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !r.cl.Closed() {
		select {
		case <-r.done:
			return
		case <-t.C:
			h.endResume(r.cl, r)
			return
		case <-tick.C:
		}
	}
	h.endResume(r.cl, r)
}

// fanoutWait bounds how long a resumed session's connection waits for
// the fan-outs in progress (awaitFanouts), and a publish to it for its
// resume (awaitResume).
const fanoutWait = 2 * time.Second

// awaitFanouts waits until every publish of another client between its
// OnPublish and the end of its fan-out is handed to its subscribers. mochi
// writes a publisher's PUBACK before the fan-out, and the fan-out takes a
// subscriber's client object from the server's map, then sets the message
// inflight on it; a session resumed in between (inheritClientSession,
// right after this event: the new client clones the old one's inflight
// messages, then replaces it in the map) leaves the message on the old
// object, never sent on the new connection (nor any later one: only a
// restart loads its record again). A session that reconnects after a
// PUBACK of a message for it therefore lost that message whenever it was
// faster than the fan-out (a reconnect right after a restart, when the
// session is the restored object, in an in-process test). Waiting here,
// before mochi clones, puts every message acknowledged before the
// CONNECT on the old object first. A publish acknowledged while this
// connection is being established can still race with it (mochi's, see
// README). The publisher's own publishes are not waited for (a takeover
// of a publisher whose PUBACK write is stuck on its old connection would
// wait for it), nor any for longer than fanoutWait: a PUBACK not written
// by then is stuck on its connection, and a fan-out never follows a
// PUBACK write that fails.
func (h *Hook) awaitFanouts(client string) {
	h.mu.Lock()
	var wait []chan struct{}
	for _, p := range h.mu.active {
		if p.client != client {
			wait = append(wait, p.ready)
		}
	}
	h.mu.Unlock()
	if len(wait) == 0 {
		return
	}
	t := time.NewTimer(fanoutWait)
	defer t.Stop()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}

// OnWillSent stores the client without its will. No ack of the client's
// waits for it (the client is gone; its next CONNACK waits for its own
// write, which comes after this one).
func (h *Hook) OnWillSent(cl *mqtt.Client, pk packets.Packet) { h.storeClient(cl, false, false) }

// storeClient stores cl's session record; with reset, after the removal
// of the stored session's subscriptions and inflight messages, in one
// commit if it fits h.budget (else in commits in turn, the client record
// last). With acked, the client's next ack (its CONNACK) waits for it.
func (h *Hook) storeClient(cl *mqtt.Client, reset, acked bool) {
	if cl.Net.Inline {
		return
	}
	rec := clientOf(cl, h.maxSessionExpiry())
	val := marshal(rec)
	key := clientKey(cl.ID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if acked {
		h.mu.conns[cl.ID] = conn{cl: cl, expiry: rec.Properties.SessionExpiryInterval}
	}
	var ops []kvOp
	if reset {
		ops = h.sessionOpsLocked(cl.ID)
	}
	ops = append(ops, kvOp{index: idxClients, key: key, val: val})
	c, err := h.submitOpsLocked(false, ops)
	if errors.Is(err, errRefused) {
		// A will of megabytes, say: the client is refused (if its
		// session outlives the connection), not the hook.
		h.Log.Warn("kdbmqtt: a session record too large to store", "client", cl.ID, "bytes", len(val), "error", err)
	}
	if err != nil && !persistent(cl) {
		// The CONNACK of a session that ends with its connection
		// promises nothing stored.
		err = nil
	}
	if acked {
		h.setLast(cl.ID, c, err)
	}
}

// persistent reports whether cl's session outlives its connection (mochi's
// OnDisconnect expire, negated).
func persistent(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

// maxSessionExpiry is the server's MaximumSessionExpiryInterval (0: none).
func (h *Hook) maxSessionExpiry() uint32 {
	if h.Opts != nil && h.Opts.Capabilities != nil {
		return h.Opts.Capabilities.MaximumSessionExpiryInterval
	}
	return 0
}

// OnDisconnect forgets a client whose session ends with its connection,
// and stores again the session of one whose MQTT 5 DISCONNECT changed its
// session expiry interval (mochi applies it to the client; stored as it
// was at the CONNECT, a restart expired the session by the old interval).
// Only the connection whose record was stored last does so: a session
// taken over meanwhile keeps its new connection's record.
func (h *Hook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.Net.Inline {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, own := h.mu.conns[cl.ID]
	own = own && c.cl == cl
	if own {
		delete(h.mu.conns, cl.ID)
	}
	if cl.StopCause() == packets.ErrSessionTakenOver {
		return
	}
	key := clientKey(cl.ID)
	if !expire {
		rec := clientOf(cl, h.maxSessionExpiry())
		if own && rec.Properties.SessionExpiryInterval != c.expiry {
			val := marshal(rec)
			// No ack waits for it (a DISCONNECT has none).
			_, _ = h.submitLocked(false, opCost(len(key), len(val)), func(tx *kdb.Txn) error { return tx.Put(idxClients, key, val) })
		}
		return
	}
	if h.mu.ended != nil {
		h.mu.ended[string(key)] = true
	}
	// Not synced: if lost, the server expires the session again at load.
	_, _ = h.submitLocked(true, opCost(len(key), 0), func(tx *kdb.Txn) error { return tx.Delete(idxClients, key) })
}

// OnClientExpired forgets an expired session: the client, its
// subscriptions and its inflight messages (mochi drops them from memory
// without further events).
func (h *Hook) OnClientExpired(cl *mqtt.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.last, cl.ID)
	if h.mu.conns[cl.ID].cl == cl {
		// A connection whose CONNACK was not written: mochi calls no
		// OnDisconnect for it.
		delete(h.mu.conns, cl.ID)
	}
	// The client record last: a crash between the commits leaves it,
	// and the session is expired again (with what is left of it).
	ops := append(h.sessionOpsLocked(cl.ID), kvOp{index: idxClients, key: clientKey(cl.ID), del: true})
	_, err := h.submitOpsLocked(false, ops)
	if errors.Is(err, errRefused) {
		h.Log.Error("kdbmqtt: an expired session's removal refused by the store; it is expired again after the next start", "client", cl.ID, "error", err)
	}
}

// sessionOpsLocked forgets the subscriptions and inflight messages of
// client's session and returns the removals of their records. A copy a
// fan-out is still gathering is not written (it finds its flight gone).
//
// The caller must hold h.mu.
func (h *Hook) sessionOpsLocked(client string) []kvOp {
	fl := h.mu.flights[client]
	delete(h.mu.flights, client)
	prefix := clientPrefix(client)
	var ops []kvOp
	_ = h.ns.View(func(s *kdb.Snapshot) error {
		it := s.Iter(idxSubs)
		for ok := it.Seek(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
			ops = append(ops, kvOp{index: idxSubs, key: bytes.Clone(it.Key()), del: true})
		}
		return it.Err()
	})
	for pid, f := range fl {
		if f.pub == nil && !f.unstored {
			ops = append(ops, kvOp{index: idxInflight, key: inflightKey(client, pid), del: true})
		}
		f.pub = nil // a fan-out still gathering it will find it gone
	}
	return ops
}

// OnSubscribed stores the subscriptions granted, before the SUBACK.
func (h *Hook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	var ops []kvOp
	for i, f := range pk.Filters {
		if i >= len(reasonCodes) || reasonCodes[i] > 2 {
			continue // refused
		}
		s := storage.Subscription{
			ID:                cl.ID + ":" + f.Filter,
			T:                 storage.SubscriptionKey,
			Client:            cl.ID,
			Qos:               reasonCodes[i],
			Filter:            f.Filter,
			Identifier:        f.Identifier,
			NoLocal:           f.NoLocal,
			RetainHandling:    f.RetainHandling,
			RetainAsPublished: f.RetainAsPublished,
		}
		ops = append(ops, kvOp{index: idxSubs, key: subKey(cl.ID, f.Filter), val: marshal(s)})
	}
	if len(ops) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := h.submitOpsLocked(false, ops)
	h.setLast(cl.ID, c, err)
}

// OnUnsubscribed removes subscriptions, before the UNSUBACK. mochi also
// calls it, with no packet ID, when a session ends or a clean start
// discards it (UnsubscribeClient): no ack follows, and nothing is kept for
// one (a clean start's CONNACK waits for the removals OnSessionEstablish
// made).
func (h *Hook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if len(pk.Filters) == 0 {
		return
	}
	ops := make([]kvOp, len(pk.Filters))
	for i, f := range pk.Filters {
		ops[i] = kvOp{index: idxSubs, key: subKey(cl.ID, f.Filter), del: true}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := h.submitOpsLocked(false, ops)
	if pk.PacketID != 0 {
		h.setLast(cl.ID, c, err)
	}
}

// OnRetainMessage stores (r 1) or removes a retained message, before the
// publisher's ack.
//
// mochi updates its retained message (Topics.RetainMessage), then calls
// this event, and nothing orders two publishers' calls as their updates:
// a clear and a set of one topic at once could be stored in the other
// order, and a restart would then load a message cleared, or lose one
// retained. So the hook stores the server's retained message of the topic
// as it is when the call comes, under h.mu: pk's, or that of an update
// that came after it (whose own call stores the same again). The last
// call, after every update, stores the last state.
func (h *Hook) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	key := retainedKey(pk.TopicName)
	var own []byte // pk's record, encoded before the lock is taken
	if r == 1 {
		m := messageOf(storage.RetainedKey, cl.ID, pk)
		m.FixedHeader.Dup = false
		own = encodeMessage(&m)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	val := h.retainedRecordLocked(pk.TopicName, cl.ID, &pk, own)
	c, err := h.submitLocked(false, opCost(len(key), len(val)), func(tx *kdb.Txn) error {
		if val == nil {
			return tx.Delete(idxRetained, key)
		}
		return tx.Put(idxRetained, key, val)
	})
	if errors.Is(err, errRefused) {
		// OnPublish refuses such a message before it gets here; a will
		// does not pass through OnPublish.
		h.Log.Warn("kdbmqtt: a retained message too large to store; not retained across a restart", "client", cl.ID, "topic", pk.TopicName, "bytes", len(val), "error", err)
	}
	if p := h.mu.open[cl.ID]; p != nil && p.tag == pk.Connect.ClientIdentifier {
		p.retSeen = true
		h.setLast(cl.ID, c, err)
	}
	// Else no ack follows (QoS 0; a will, sent when the client is gone,
	// or later, delayed): nothing is kept for one, and an error would
	// stick to the client's next connection and refuse its CONNACK. The
	// client's later acks wait for later commits, which take effect after
	// this one.
}

// retainedRecordLocked returns the record of the server's retained message
// of topic as it is now, or nil if it has none: ownVal if that message is
// own (the PUBLISH whose event asks), else the message encoded, with
// client as its client if it has no origin.
//
// The caller must hold h.mu.
func (h *Hook) retainedRecordLocked(topic, client string, own *packets.Packet, ownVal []byte) []byte {
	cur, ok := h.srv.Topics.Retained.Get(topic)
	switch {
	case !ok || len(cur.Payload) == 0:
		// Cleared (by own, or by an update after it).
		return nil
	case own != nil && ownVal != nil && cur.Origin == own.Origin && cur.Created == own.Created && bytes.Equal(cur.Payload, own.Payload):
		return ownVal
	}
	// Set by an update after own, or own cleared a message another
	// update set again: store that one.
	if cur.Origin != "" {
		client = cur.Origin
	}
	m := messageOf(storage.RetainedKey, client, cur)
	m.FixedHeader.Dup = false
	return encodeMessage(&m)
}

// retainAvailable reports whether the server retains messages (mochi's
// retainMessage does nothing, and calls no OnRetainMessage, if not).
func (h *Hook) retainAvailable() bool {
	return h.srv.Options == nil || h.srv.Options.Capabilities == nil || h.srv.Options.Capabilities.RetainAvailable != 0
}

// OnRetainedExpired removes an expired retained message.
func (h *Hook) OnRetainedExpired(topic string) {
	key := retainedKey(topic)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.submitLocked(true, opCost(len(key), 0), func(tx *kdb.Txn) error { return tx.Delete(idxRetained, key) })
}

// OnSysInfoTick stores the server's counters (not synced: they are
// statistics).
func (h *Hook) OnSysInfoTick(sys *system.Info) {
	val := marshal(&storage.SystemInfo{ID: storage.SysInfoKey, T: storage.SysInfoKey, Info: *sys.Clone()})
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.submitLocked(true, opCost(len(sysKey), len(val)), func(tx *kdb.Txn) error { return tx.Put(idxSys, sysKey, val) })
}

// OnPublish stores a PUBLISH of QoS 1 or 2 from a client before the server
// acknowledges it (the server writes the ack before it hands the message
// to the subscribers): the pending-publish record, with, for QoS 2, the
// PUBREC state of its packet ID. The fan-out's commit (OnPublished)
// removes it; one left at a restart is published again (OnStarted).
//
// A message the hook would have to store (QoS 1 or 2, or retained) and
// whose record, or a subscriber's copy of it, the store could not take
// (maxRecord) is refused before anything is written: see refuseTooLarge.
func (h *Hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Retain && len(pk.Payload) > 0 && !isReplay(pk) {
		m := messageOf(storage.RetainedKey, cl.ID, pk)
		if n := encodedMessageSize(&m); n > h.maxRecord() {
			return h.refuseTooLarge(cl, pk, n)
		}
	}
	if pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	if cl.Net.Inline {
		if seq, ok := replaySeq(pk.Connect.ClientIdentifier); ok {
			p := &publish{tag: pk.Connect.ClientIdentifier, seq: seq, client: cl.ID, replay: true, ready: make(chan struct{})}
			h.mu.Lock()
			h.mu.active[p.tag] = p
			h.mu.Unlock()
		}
		return pk, nil // no ack to protect: the fan-out is written as it goes
	}
	rec := messageOf(pendingT, cl.ID, pk)
	rec.Origin = cl.ID
	rec.FixedHeader.Dup = false
	if n := encodedMessageSize(&rec); n > h.maxRecord() {
		return h.refuseTooLarge(cl, pk, n)
	}
	val := encodeMessage(&rec)
	var rel []byte
	if pk.FixedHeader.Qos == 2 {
		m := messageOf(storage.InflightKey, cl.ID, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Pubrec},
			PacketID:    pk.PacketID,
			Created:     time.Now().Unix(),
		})
		rel = encodeMessage(&m)
	}
	h.mu.Lock()
	for r := h.resumingSubscriberLocked(pk.TopicName); r != nil; r = h.resumingSubscriberLocked(pk.TopicName) {
		h.mu.Unlock()
		h.awaitResume(r)
		h.mu.Lock()
	}
	if old := h.mu.open[cl.ID]; old != nil {
		h.finishLocked(old, false) // not expected: a client's packets are processed in turn
	}
	h.mu.seq++
	p := &publish{tag: tagPrefix + strconv.FormatUint(h.mu.seq, 10), seq: h.mu.seq, client: cl.ID, pid: pk.PacketID, qos: pk.FixedHeader.Qos, ready: make(chan struct{})}
	pkey, ikey := pendingKey(p.seq), inflightKey(cl.ID, pk.PacketID)
	cost := opCost(len(pkey), len(val)) + opCost(len(ikey), len(rel))
	// A retained publish is retained in this commit too, by a reference
	// to its pending record (encodeRetainedRef; a removal for an empty
	// payload): a crash after this commit and before OnRetainMessage's
	// left the message published again at the restart but not retained.
	// OnRetainMessage then stores the server's retained message in its
	// place (which is not always this one: see there).
	var rkey, rval []byte
	if pk.FixedHeader.Retain && h.retainAvailable() {
		p.retTopic, p.retWrote = pk.TopicName, true
		rkey = retainedKey(pk.TopicName)
		if len(pk.Payload) > 0 {
			rval = encodeRetainedRef(p.seq)
		}
		cost += opCost(len(rkey), len(rval))
	}
	c, err := h.submitLocked(false, cost, func(tx *kdb.Txn) error {
		if err := tx.Put(idxPending, pkey, val); err != nil {
			return err
		}
		switch {
		case rkey == nil:
		case rval == nil:
			if err := tx.Delete(idxRetained, rkey); err != nil {
				return err
			}
		default:
			if err := tx.Put(idxRetained, rkey, rval); err != nil {
				return err
			}
		}
		if rel != nil {
			return tx.Put(idxInflight, ikey, rel)
		}
		return nil
	})
	if err != nil {
		h.mu.Unlock()
		if errors.Is(err, errRefused) {
			// maxRecord let it through, yet the store refused it.
			return h.refuseTooLarge(cl, pk, len(val))
		}
		// Refuse the ack: close now.
		h.wait(cl, nil, true, err)
		return pk, packets.ErrRejectPacket
	}
	if rel != nil {
		h.flightsOf(cl.ID)[pk.PacketID] = &flight{kind: packets.Pubrec, created: time.Now().Unix(), commit: c}
	}
	h.setLast(cl.ID, c, nil)
	h.mu.active[p.tag] = p
	h.mu.open[cl.ID] = p
	h.mu.Unlock()
	pk.Connect.ClientIdentifier = p.tag
	return pk, nil
}

// copySlack is what a subscriber's copy of a message (its inflight record)
// may hold beyond the message's own record: the subscriber's client ID (at
// most 65,535 bytes) in place of the publisher's, and its subscription
// identifiers.
const copySlack = 64<<10 + 1<<10

// maxRecord returns the largest message record (pending publish, retained
// message) the hook accepts: one that the store takes in a commit of its
// own under any key the hook makes, with room for any subscriber's copy of
// it (copySlack, or a quarter of MaxBatchSize if that is less: a store of
// small journal segments). With kdb's defaults (MaxValueSize 8 MiB,
// SegmentSize 32 MiB: MaxBatchSize 8 MiB) it is 8 MiB less 66 KiB and 640
// bytes.
func (h *Hook) maxRecord() int {
	return min(kdb.MaxValueSize, h.budget-opOverhead-kdb.MaxKeySize) - min(copySlack, h.budget/4)
}

// refuseTooLarge refuses a message whose record (n bytes) the store cannot
// take, before anything of it is written, and never fails the hook: an
// MQTT 5 QoS 1 publisher gets a PUBACK with reason code 0x97 (quota
// exceeded: an implementation's limit) and stays connected; any other
// publisher (QoS 2, whose refusal mochi would send as a PUBACK; QoS 0
// retained, which has no ack; MQTT 3.1.1, whose PUBACK has no reason code)
// is disconnected, with DISCONNECT 0x95 (packet too large) in MQTT 5. The
// message reaches no subscriber. A message of the server's own (Inline) is
// dropped.
func (h *Hook) refuseTooLarge(cl *mqtt.Client, pk packets.Packet, n int) (packets.Packet, error) {
	h.Log.Warn("kdbmqtt: refusing a message too large to store", "client", cl.ID, "topic", pk.TopicName,
		"qos", pk.FixedHeader.Qos, "retain", pk.FixedHeader.Retain, "record_bytes", n, "max_record_bytes", h.maxRecord())
	switch {
	case cl.Net.Inline:
	case cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos == 1:
		// Written here rather than returned as a packets.Code, for which
		// mochi would log the whole packet, payload and all, at error
		// level.
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Puback},
			PacketID:    pk.PacketID,
			ReasonCode:  packets.ErrQuotaExceeded.Code,
			Properties:  packets.Properties{ReasonString: fmt.Sprintf("kdbmqtt: a message record of %d bytes; the store takes %d", n, h.maxRecord())},
			Created:     time.Now().Unix(),
		}
		if err := cl.WritePacket(ack); err != nil {
			cl.Stop(err)
		}
	case cl.Properties.ProtocolVersion == 5:
		_ = h.srv.DisconnectClient(cl, packets.ErrPacketTooLarge)
	default:
		cl.Stop(packets.ErrPacketTooLarge)
	}
	return pk, packets.ErrRejectPacket
}

func isReplay(pk packets.Packet) bool {
	return strings.HasPrefix(pk.Connect.ClientIdentifier, replayPrefix)
}

func replaySeq(tag string) (uint64, bool) {
	if !strings.HasPrefix(tag, replayPrefix) {
		return 0, false
	}
	seq, err := strconv.ParseUint(tag[len(replayPrefix):], 10, 64)
	return seq, err == nil
}

// OnPublished commits the fan-out of a publish: the inflight messages of
// its subscribers and the removal of its pending-publish record, together.
func (h *Hook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	h.finishTag(pk.Connect.ClientIdentifier, true)
}

// OnPacketProcessed closes a publish the server did not hand on (an error,
// or a later hook rejected it): its pending record is removed.
func (h *Hook) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, err error) {
	if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.mu.active[pk.Connect.ClientIdentifier]; p != nil {
		h.finishLocked(p, false)
	}
	if p := h.mu.open[cl.ID]; p != nil && !cl.Net.Inline {
		h.finishLocked(p, false)
	}
}

func (h *Hook) finishTag(tag string, published bool) {
	if tag == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.mu.active[tag]; p != nil {
		h.finishLocked(p, published)
	}
}

func (h *Hook) finishLocked(p *publish, published bool) {
	delete(h.mu.active, p.tag)
	if h.mu.open[p.client] == p {
		delete(h.mu.open, p.client)
	}
	var puts []fanout
	for _, w := range p.puts {
		if h.mu.flights[w.client][w.pid] == w.f {
			puts = append(puts, w)
		}
	}
	var dropRec []byte
	if !published && p.qos == 2 && !p.replay {
		// The server never took the message: its PUBREC state goes too.
		if fl := h.mu.flights[p.client]; fl != nil && fl[p.pid] != nil && fl[p.pid].kind == packets.Pubrec {
			delete(fl, p.pid)
			dropRec = inflightKey(p.client, p.pid)
		}
	}
	if p.retWrote && !p.retSeen {
		// Not expected (OnRetainMessage follows an OnPublish that stored
		// a retained publish, unless a hook after this one rejected it):
		// the reference would outlive the pending record it stands for.
		// Store the server's retained message of the topic instead,
		// before the pending record goes.
		key := retainedKey(p.retTopic)
		val := h.retainedRecordLocked(p.retTopic, p.client, nil, nil)
		_, _ = h.submitLocked(true, opCost(len(key), len(val)), func(tx *kdb.Txn) error {
			if val == nil {
				return tx.Delete(idxRetained, key)
			}
			return tx.Put(idxRetained, key, val)
		})
	}
	c, err := h.commitFanoutLocked(p, puts, dropRec)
	for _, w := range p.puts {
		if w.f.pub == p {
			w.f.pub, w.f.commit, w.f.err, w.f.noSync = nil, c, err, true
		}
	}
	p.commit, p.err = c, err
	close(p.ready)
}

// fanKeyLen is the length of a fan-out part's key (fanoutKey).
const fanKeyLen = 12

// commitFanoutLocked writes a publish's fan-out: the subscribers' copies
// (puts), the removal of dropRec if set, and the removal of the pending
// publish; it returns the last commit, which every copy waits for before it
// is sent (gate). Not synced of its own: the next synced commit (the next
// publish's pending record, typically) carries it, and until it is durable
// the pending publish it removes is still on disk. A QoS 2 copy waits for a
// sync before it is sent (gate).
//
// A fan-out that fits h.budget is one commit. A larger one (a large message
// to many subscribers) is split into parts that fit, each written with a
// fan-out record (index "fan": the pending publish's sequence and the
// part's number → the inflight keys it wrote), and a last commit that
// removes the pending publish with the fan-out records. All are submitted
// here in turn under h.mu, so nothing of the hook's comes between them in
// the journal, and a crash keeps a prefix of them: either the last commit
// is durable, and with it every part, or the pending publish is still
// there, and load removes the copies its fan-out records name before the
// message is published again (so no subscriber gets it twice: the copies
// of an interrupted fan-out were never sent, as each waits for the last
// commit). A copy too large to be stored even alone is not stored: it is
// logged, and sent when the stored copies are (dropCopyLocked; copySlack
// makes this a subscriber with a client ID of tens of kilobytes on a store
// of small segments).
func (h *Hook) commitFanoutLocked(p *publish, puts []fanout, dropRec []byte) (*kdb.Commit, error) {
	pkey := pendingKey(p.seq)
	keys := make([][]byte, len(puts))
	total := opCost(len(pkey), 0)
	if dropRec != nil {
		total += opCost(len(dropRec), 0)
	}
	final := total
	for i, w := range puts {
		keys[i] = inflightKey(w.client, w.pid)
		total += opCost(len(keys[i]), len(w.val))
	}
	finish := func(tx *kdb.Txn, fans [][]byte) error {
		if dropRec != nil {
			if err := tx.Delete(idxInflight, dropRec); err != nil {
				return err
			}
		}
		for _, k := range fans {
			if err := tx.Delete(idxFanout, k); err != nil {
				return err
			}
		}
		return tx.Delete(idxPending, pkey)
	}
	if total <= h.budget {
		c, err := h.submitLocked(true, total, func(tx *kdb.Txn) error {
			for i, w := range puts {
				if err := tx.Put(idxInflight, keys[i], w.val); err != nil {
					return err
				}
			}
			return finish(tx, nil)
		})
		if !errors.Is(err, errRefused) {
			return c, err
		}
		// The estimate was short: split it.
	}
	var fans [][]byte
	var cur []int
	empty := opCost(fanKeyLen, 0)
	cost := empty
	for i, w := range puts {
		n := opCost(len(keys[i]), len(w.val)) + len(keys[i]) + 4 // with its entry in the fan-out record
		if !h.fitsAlone(len(keys[i]), len(w.val)) || empty+n > h.budget {
			h.dropCopyLocked(w, fmt.Errorf("%w: a copy of %d bytes (the store takes %d bytes a commit)", errRefused, len(w.val), h.budget))
			continue
		}
		if len(cur) > 0 && cost+n > h.budget {
			if err := h.partLocked(p.seq, &fans, puts, keys, cur); err != nil {
				return nil, err
			}
			cur, cost = nil, empty
		}
		cur = append(cur, i)
		cost += n
	}
	if len(cur) > 0 {
		if err := h.partLocked(p.seq, &fans, puts, keys, cur); err != nil {
			return nil, err
		}
	}
	return h.submitLocked(true, final+len(fans)*empty, func(tx *kdb.Txn) error { return finish(tx, fans) })
}

// partLocked submits one part of a split fan-out: the copies puts[idx] and
// the fan-out record naming their keys, appended to *fans. A part the
// store refuses for its size is submitted again copy by copy; a copy
// refused alone is dropped (dropCopyLocked). The error is the store's
// failure.
func (h *Hook) partLocked(seq uint64, fans *[][]byte, puts []fanout, keys [][]byte, idx []int) error {
	fk := fanoutKey(seq, uint32(len(*fans)))
	list := make([][]byte, len(idx))
	cost := opCost(len(fk), 0)
	for j, i := range idx {
		list[j] = keys[i]
		cost += opCost(len(keys[i]), len(puts[i].val))
	}
	val := encodeKeyList(list)
	cost += len(val)
	_, err := h.submitLocked(true, cost, func(tx *kdb.Txn) error {
		for _, i := range idx {
			if err := tx.Put(idxInflight, keys[i], puts[i].val); err != nil {
				return err
			}
		}
		return tx.Put(idxFanout, fk, val)
	})
	switch {
	case err == nil:
		*fans = append(*fans, fk)
		return nil
	case !errors.Is(err, errRefused):
		return err
	case len(idx) > 1:
		for _, i := range idx {
			if err := h.partLocked(seq, fans, puts, keys, []int{i}); err != nil {
				return err
			}
		}
		return nil
	default:
		h.dropCopyLocked(puts[idx[0]], err)
		return nil
	}
}

// dropCopyLocked gives up storing a subscriber's copy the store refused
// for its size. Its flight stays, marked unstored and still on its
// publish, so that finishLocked gives it the fan-out's last commit and
// gate holds the copy until that commit (and, for QoS 2, a sync), as it
// holds the stored copies: until then the pending publish is on disk, and
// a crash publishes it again, so a copy sent earlier would be delivered
// twice. The copy is then sent without being stored.
func (h *Hook) dropCopyLocked(w fanout, err error) {
	h.Log.Error("kdbmqtt: a subscriber's copy of a message is too large to store: sent once its fan-out is written, not stored", "client", w.client, "packet", w.pid, "bytes", len(w.val), "error", err)
	w.f.unstored = true
}

// OnQosPublish stores a message of QoS 1 or 2 the server keeps inflight
// for a client: with its publish's fan-out if it has one, else on its own.
func (h *Hook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, resends int) {
	switch pk.FixedHeader.Type {
	case packets.Publish, packets.Pubrec:
	default:
		return // PUBACK and PUBCOMP: held only while the server writes them
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fl := h.flightsOf(cl.ID)
	if f := fl[pk.PacketID]; f != nil && f.kind == pk.FixedHeader.Type && (pk.FixedHeader.Type == packets.Pubrec || pk.FixedHeader.Dup) {
		return // stored already (a resend, or OnPublish stored the PUBREC state)
	}
	m := messageOf(storage.InflightKey, cl.ID, pk)
	m.FixedHeader.Dup = false
	m.Sent = sent
	val := encodeMessage(&m)
	f := &flight{kind: pk.FixedHeader.Type, created: pk.Created}
	fl[pk.PacketID] = f
	if p := h.mu.active[pk.Connect.ClientIdentifier]; p != nil && pk.FixedHeader.Type == packets.Publish {
		f.pub = p
		p.puts = append(p.puts, fanout{client: cl.ID, pid: pk.PacketID, f: f, val: val})
		return
	}
	key := inflightKey(cl.ID, pk.PacketID)
	f.commit, f.err = h.submitLocked(false, opCost(len(key), len(val)), func(tx *kdb.Txn) error { return tx.Put(idxInflight, key, val) })
	if errors.Is(f.err, errRefused) && pk.FixedHeader.Type == packets.Publish {
		// A retained message sent to a new subscriber, say, whose copy
		// is larger than the store takes (see copySlack).
		delete(fl, pk.PacketID)
		h.Log.Error("kdbmqtt: a subscriber's copy of a message is too large to store: sent, not stored", "client", cl.ID, "packet", pk.PacketID, "bytes", len(val), "error", f.err)
		return
	}
	if pk.FixedHeader.Type == packets.Pubrec {
		h.setLast(cl.ID, f.commit, f.err)
	}
}

// OnQosComplete removes a completed inflight message (not synced: if the
// removal is lost, the message is sent again, as QoS 1 allows; a QoS 2
// message is by then in its PUBREL state, whose resend delivers nothing).
func (h *Hook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	_, _ = h.dropFlight(cl, pk.PacketID, true)
}

// OnQosDropped removes a dropped inflight message, except when cl is a
// session's old client being taken over: mochi moves its inflight messages
// to the new client (Inflight.Clone) and then drops them from the old one
// (ClearInflights), with this event for each, and the new client resends
// them. Removing their records there lost them if the server stopped before
// the client acknowledged them. (On a takeover with clean start, mochi drops
// them before it marks the old client taken over: they go.)
func (h *Hook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	_, _ = h.dropFlight(cl, pk.PacketID, true)
}

// dropFlight removes a client's inflight record and returns the commit
// (nil with noSync: the removal is queued for the next commit), or the
// error of a removal not made.
func (h *Hook) dropFlight(cl *mqtt.Client, pid uint16, noSync bool) (*kdb.Commit, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fl := h.mu.flights[cl.ID]
	f := fl[pid]
	if f == nil {
		return nil, nil
	}
	delete(fl, pid)
	if len(fl) == 0 {
		delete(h.mu.flights, cl.ID)
	}
	if f.pub != nil || f.unstored {
		return nil, nil // never written: its fan-out skips it, or it was not stored
	}
	key := inflightKey(cl.ID, pid)
	if noSync {
		// Not synced, so not urgent: the next commit carries it.
		h.mu.dels = append(h.mu.dels, key)
		if !h.mu.delTimer {
			h.mu.delTimer = true
			time.AfterFunc(delFlush, h.flushDels)
		}
		return nil, nil
	}
	return h.submitLocked(false, opCost(len(key), 0), func(tx *kdb.Txn) error { return tx.Delete(idxInflight, key) })
}

// delFlush bounds how long an inflight removal waits for a commit to
// carry it.
const delFlush = 5 * time.Millisecond

func (h *Hook) flushDels() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.delTimer = false
	if len(h.mu.dels) > 0 && !h.mu.stopped {
		_, _ = h.submitLocked(true, 0, nil)
	}
}

// OnPacketEncode holds each packet that acknowledges or hands on
// something stored until that is durable:
//   - CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK: what the client's packet
//     made the hook write (session, pending publish, retained message,
//     subscriptions);
//   - PUBLISH (QoS 1, 2) to a subscriber: its inflight record, so a message
//     a client received is always redelivered with the same packet ID
//     (never published again as a new message);
//   - PUBREL: the PUBREL state of its QoS 2 message (a resend after a
//     restart is then a PUBREL, not the PUBLISH again);
//   - PUBCOMP: the removal of the PUBREC state of its packet ID.
func (h *Hook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Connack, packets.Puback, packets.Pubrec, packets.Suback, packets.Unsuback:
		h.barrier(cl)
	case packets.Pubcomp:
		c, err := h.dropFlight(cl, pk.PacketID, false)
		if err != nil {
			h.refuse(cl, err)
			break
		}
		if c != nil && !h.wait(cl, c, false, nil) {
			break
		}
		h.barrier(cl)
	case packets.Publish:
		if pk.FixedHeader.Qos > 0 {
			h.gate(cl, pk.PacketID, pk.FixedHeader.Qos == 2)
		}
	case packets.Pubrel:
		h.gate(cl, pk.PacketID, true)
		h.release(cl, pk.PacketID)
	}
	return pk
}

// gate waits until the current state of a client's inflight packet is
// written. A fan-out's commit is not synced of its own: a QoS 1 copy may
// go out before it is durable (if it is lost, its pending publish is
// still on disk and the restart publishes it again: a QoS 1 duplicate);
// with durable set (a QoS 2 copy, which must never be delivered twice) the
// gate also waits for DB.Sync.
func (h *Hook) gate(cl *mqtt.Client, pid uint16, durable bool) {
	h.mu.Lock()
	f := h.mu.flights[cl.ID][pid]
	var p *publish
	var c *kdb.Commit
	var werr error
	if f != nil {
		p, c, werr = f.pub, f.commit, f.err
	}
	h.mu.Unlock()
	if f == nil {
		return
	}
	if p != nil {
		<-p.ready
		c, werr = p.commit, p.err
	}
	if werr != nil {
		// The write of this state was not made: the store failed.
		h.refuse(cl, werr)
		return
	}
	if c == nil || !h.wait(cl, c, false, nil) {
		return
	}
	h.mu.Lock()
	needSync := durable && f.noSync && f.commit == c
	h.mu.Unlock()
	if !needSync {
		return
	}
	// c is applied (Wait returned): DB.Sync makes it durable, sharing
	// its fsync with the writers syncing now.
	if err := h.db.Sync(); err != nil {
		h.fail(err)
		h.Log.Error("kdbmqtt: not sending: the store sync failed; closing the connection", "client", cl.ID, "error", err)
		cl.Stop(err)
		return
	}
	h.mu.Lock()
	if f.commit == c {
		f.noSync = false
	}
	h.mu.Unlock()
}

// release stores the PUBREL state of an outbound QoS 2 message and waits
// for it.
func (h *Hook) release(cl *mqtt.Client, pid uint16) {
	h.mu.Lock()
	f := h.mu.flights[cl.ID][pid]
	if f == nil || f.kind != packets.Publish {
		h.mu.Unlock()
		return
	}
	m := messageOf(storage.InflightKey, cl.ID, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1},
		PacketID:    pid,
		Created:     f.created,
	})
	val := encodeMessage(&m)
	key := inflightKey(cl.ID, pid)
	c, err := h.submitLocked(false, opCost(len(key), len(val)), func(tx *kdb.Txn) error { return tx.Put(idxInflight, key, val) })
	f.kind, f.commit, f.err, f.unstored = packets.Pubrel, c, err, false
	h.mu.Unlock()
	h.wait(cl, c, true, err)
}

// OnStarted publishes again the messages acknowledged and not yet handed
// to their subscribers when the process stopped, oldest first, as their
// publisher sent them (not retained: the retained copy was stored before
// the ack).
func (h *Hook) OnStarted() {
	h.mu.Lock()
	h.mu.ended = nil
	h.mu.Unlock()
	pend := h.replay
	h.replay = nil
	if len(pend) == 0 {
		return // replayed is closed at Init
	}
	defer close(h.replayed)
	sort.Slice(pend, func(i, j int) bool { return pend[i].seq < pend[j].seq })
	for _, p := range pend {
		pk := p.msg.ToPacket()
		pk.FixedHeader.Type = packets.Publish
		pk.FixedHeader.Retain = false
		pk.FixedHeader.Dup = false
		pk.Connect.ClientIdentifier = replayPrefix + strconv.FormatUint(p.seq, 10)
		cl := h.srv.NewClient(nil, mqtt.LocalListener, p.msg.Client, true)
		cl.Properties.ProtocolVersion = 5
		if err := h.srv.InjectPacket(cl, pk); err != nil {
			h.Log.Error("kdbmqtt: publishing a pending message again failed", "seq", p.seq, "topic", pk.TopicName, "error", err)
		}
	}
	if len(pend) > 0 {
		h.Log.Info("kdbmqtt: published again the messages acknowledged before the restart and not yet handed to their subscribers", "messages", len(pend))
	}
}

// StoredClients returns the stored sessions.
func (h *Hook) StoredClients() ([]storage.Client, error) {
	var out []storage.Client
	err := h.ns.View(func(s *kdb.Snapshot) error {
		if n, err := s.Len(idxClients); err == nil {
			out = make([]storage.Client, 0, n) // sized once, not regrown (and copied) ~20 times for 100,000
		}
		return h.scan(s, idxClients, func(k, v []byte) error {
			c, err := decodeClient(v)
			if err != nil {
				return err
			}
			if !bytes.Equal(k, clientKey(c.ID)) {
				return fmt.Errorf("%w: client %q under another key", errMalformed, c.ID)
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// StoredSubscriptions returns the stored subscriptions.
func (h *Hook) StoredSubscriptions() ([]storage.Subscription, error) {
	var out []storage.Subscription
	var orphans [][]byte
	err := h.ns.View(func(s *kdb.Snapshot) error {
		if n, err := s.Len(idxSubs); err == nil {
			out = make([]storage.Subscription, 0, n) // sized once, not regrown (and copied) ~20 times for 100,000
		}
		return h.scan(s, idxSubs, func(k, v []byte) error {
			if i := bytes.IndexByte(k, 0); i > 0 && h.orphan(s, k[:i]) {
				orphans = append(orphans, bytes.Clone(k))
				return nil
			} else if i > 0 && h.badClient(k[:i]) {
				// Removed with its client record (dropBadClients); a
				// malformed one is also logged as such.
				_, err := decodeSub(v)
				return err
			}
			sub, err := decodeSub(v)
			if err != nil {
				return err
			}
			out = append(out, sub)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	h.dropOrphans(idxSubs, orphans)
	return out, nil
}

// orphan reports whether a record of client key ck (a subscription, an
// inflight message) belongs to no session: its client record is not
// stored, or OnDisconnect ended its session during this start. mochi puts
// every subscription it is handed in its topic tree, client or not, so
// that a later client with that ID would get messages it never subscribed
// to.
func (h *Hook) orphan(s *kdb.Snapshot, ck []byte) bool {
	h.mu.Lock()
	ended := h.mu.ended[string(ck)]
	h.mu.Unlock()
	if ended {
		return true
	}
	_, err := s.Get(idxClients, ck)
	return errors.Is(err, kdb.ErrNotFound)
}

// badClient reports whether StoredClients skipped the record of client
// key ck.
func (h *Hook) badClient(ck []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.badClients[string(ck)]
}

// dropBadClients removes the client records StoredClients skipped with
// every subscription and inflight record under their keys (readable or
// not), the client record last (commits in turn: a crash between them
// leaves the client record, found again at the next start, or orphans,
// removed then), and logs each client with what was removed. Does not
// sync.
//
// Why remove, not keep for a repair: the server restores no session for
// such a record, and the client's next CONNECT is told none is present,
// so by MQTT's rules it starts a new session and subscribes again; the
// old session's subscriptions and queued messages are of no use to it,
// and no tool repairs the record. Kept, they harmed: the new session's
// client record made them its own at the restart after it (subscriptions
// it never made, messages of the old session), and otherwise they stayed
// stored for good. The loss, which the damage made, is logged at error
// level per client, with what was removed.
func (h *Hook) dropBadClients() {
	h.mu.Lock()
	defer h.mu.Unlock()
	bad := make([]string, 0, len(h.mu.badClients))
	for k := range h.mu.badClients {
		bad = append(bad, k)
	}
	h.mu.badClients = nil
	sort.Strings(bad)
	for _, ck := range bad {
		prefix := append([]byte(ck), 0)
		var ops []kvOp
		n := map[string]int{}
		err := h.ns.View(func(s *kdb.Snapshot) error {
			for _, index := range []string{idxSubs, idxInflight} {
				it := s.Iter(index)
				for ok := it.Seek(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
					ops = append(ops, kvOp{index: index, key: bytes.Clone(it.Key()), del: true})
					n[index]++
				}
				if err := it.Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			ops = append(ops, kvOp{index: idxClients, key: []byte(ck), del: true})
			_, err = h.submitOpsLocked(true, ops)
		}
		if err != nil {
			h.Log.Error("kdbmqtt: removing the session of a client record that could not be read failed", "client_key", ck, "error", err)
			continue
		}
		h.Log.Error("kdbmqtt: a client record that could not be read: its session is not restored; removed with its subscriptions and inflight messages",
			"client_key", ck, "subscriptions", n[idxSubs], "inflight", n[idxInflight])
	}
}

// dropOrphans removes the records of index that belong to no session
// (orphan), in commits within h.budget (not synced: one left by a crash
// is removed at the next start).
func (h *Hook) dropOrphans(index string, keys [][]byte) {
	h.dropRecords(index, keys, "records of sessions that had ended")
}

// dropRecords removes the records keys of index, which load found of no
// use (what says why, for the log), in commits within h.budget. Does not
// sync: a record a crash keeps is found again at the next start.
func (h *Hook) dropRecords(index string, keys [][]byte, what string) {
	if len(keys) == 0 {
		return
	}
	ops := make([]kvOp, len(keys))
	for i, k := range keys {
		ops[i] = kvOp{index: index, key: k, del: true}
	}
	h.mu.Lock()
	_, err := h.submitOpsLocked(true, ops)
	h.mu.Unlock()
	if err != nil {
		h.Log.Error("kdbmqtt: removing stored records failed", "what", what, "index", Namespace+"/"+index, "records", len(keys), "error", err)
		return
	}
	h.Log.Info("kdbmqtt: removed stored records", "what", what, "index", Namespace+"/"+index, "records", len(keys))
}

// StoredRetainedMessages returns the stored retained messages.
func (h *Hook) StoredRetainedMessages() ([]storage.Message, error) {
	var out []storage.Message
	var dangling [][]byte
	err := h.ns.View(func(s *kdb.Snapshot) error {
		if n, err := s.Len(idxRetained); err == nil {
			out = make([]storage.Message, 0, n) // sized once, not regrown (and copied) ~20 times for 100,000
		}
		return h.scan(s, idxRetained, func(k, v []byte) error {
			if seq, ok := decodeRetainedRef(v); ok {
				// load resolved every reference to a pending publish it
				// read: this one's is not stored, or was skipped.
				dangling = append(dangling, bytes.Clone(k))
				return fmt.Errorf("%w: a retained reference to pending publish %d, which is not stored or was skipped; removed", errMalformed, seq)
			}
			// Decoded in place: a storage.Message is large, and 100,000
			// copies of it showed in a restart's profile.
			out = append(out, storage.Message{})
			m := &out[len(out)-1]
			err := decodeMessageInto(m, v, "retained")
			if err == nil && (m.TopicName == "" || m.FixedHeader.Type != packets.Publish) {
				err = fmt.Errorf("%w: retained record topic=%q type=%d", errMalformed, m.TopicName, m.FixedHeader.Type)
			}
			if err != nil {
				*m = storage.Message{} // the slot beyond len keeps no pointers
				out = out[:len(out)-1]
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	h.dropRecords(idxRetained, dangling, "retained references to no stored message")
	return out, nil
}

// StoredInflightMessages returns the inflight messages read at Init, less
// those of no session (orphan), which it removes, and those of a client
// record StoredClients skipped, which it removes with that record
// (dropBadClients).
func (h *Hook) StoredInflightMessages() ([]storage.Message, error) {
	in := h.loadedInflight
	h.loadedInflight = nil
	out := in[:0]
	var orphans [][]byte
	err := h.ns.View(func(s *kdb.Snapshot) error {
		for _, m := range in {
			ck := clientKey(m.Client)
			orphan := h.orphan(s, ck)
			if orphan || h.badClient(ck) {
				if orphan {
					orphans = append(orphans, inflightKey(m.Client, m.PacketID))
				} // else removed with its client record (dropBadClients)
				h.mu.Lock()
				if fl := h.mu.flights[m.Client]; fl != nil && fl[m.PacketID] != nil && fl[m.PacketID].commit == nil && fl[m.PacketID].pub == nil {
					delete(fl, m.PacketID) // the loaded record's, not rewritten since
					if len(fl) == 0 {
						delete(h.mu.flights, m.Client)
					}
				}
				h.mu.Unlock()
				continue
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.mu.ended = nil
	h.mu.Unlock()
	h.dropOrphans(idxInflight, orphans)
	h.dropBadClients()
	return out, nil
}

// StoredSysInfo returns the stored server counters. mochi calls it last
// of the Stored* events, after it loaded the retained and inflight
// messages and before it serves: the hook then gives those messages their
// expiry time (restoreExpiry).
func (h *Hook) StoredSysInfo() (storage.SystemInfo, error) {
	h.restoreExpiry()
	return h.storedSysInfo()
}

// restoreExpiry gives the retained and inflight messages mochi loaded the
// expiry time mochi gives a message it receives (Packet.Expiry: Created
// plus the message expiry interval, at most the server's maximum), which
// storage.Message cannot carry: without it, a message with an MQTT 5
// expiry interval never expired after a restart (only the server's
// maximum, counted from Created, applied).
func (h *Hook) restoreExpiry() {
	var most int64
	if h.Opts != nil && h.Opts.Capabilities != nil {
		most = h.Opts.Capabilities.MaximumMessageExpiryInterval
	}
	expiry := func(pk *packets.Packet) bool {
		if pk.Expiry != 0 || pk.Properties.MessageExpiryInterval == 0 {
			return false
		}
		e := int64(pk.Properties.MessageExpiryInterval)
		if most > 0 && most < e {
			e = most
		}
		pk.Expiry = pk.Created + e
		pk.ProtocolVersion = 5 // mochi expires only MQTT 5 messages by their interval
		return true
	}
	for topic, pk := range h.srv.Topics.Retained.GetAll() {
		if expiry(&pk) {
			h.srv.Topics.Retained.Add(topic, pk)
		}
	}
	for _, cl := range h.srv.Clients.GetAll() {
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.FixedHeader.Type == packets.Publish && expiry(&pk) {
				cl.State.Inflight.Set(pk)
			}
		}
	}
}

func (h *Hook) storedSysInfo() (storage.SystemInfo, error) {
	var v storage.SystemInfo
	b, err := h.ns.Get(idxSys, sysKey)
	if errors.Is(err, kdb.ErrNotFound) {
		return v, nil
	}
	if err != nil {
		if errors.Is(err, kdb.ErrCorrupt) {
			h.skip(idxSys, sysKey, err)
			return v, nil
		}
		return v, err
	}
	if err := v.UnmarshalBinary(b); err != nil {
		h.skip(idxSys, sysKey, fmt.Errorf("%w: %v", errMalformed, err))
		return storage.SystemInfo{}, nil
	}
	return v, nil
}
