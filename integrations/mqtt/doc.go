// Package kdbmqtt is a storage hook for the mochi-mqtt broker
// (github.com/mochi-mqtt/server/v2) on a kdb store: sessions,
// subscriptions, retained messages, inflight QoS 1 and 2 messages and the
// server's counters, stored and loaded through the events of mochi's own
// storage hooks (hooks/storage: bolt, badger, pebble, redis).
//
//	db, err := kdb.Open(dir, nil)
//	srv := mqtt.New(&mqtt.Options{})
//	err = srv.AddHook(new(kdbmqtt.Hook), &kdbmqtt.Options{DB: db, Server: srv})
//	... add listeners, srv.Serve(), and at the end srv.Close(), db.Close()
//
// Add it after every other hook whose OnPublish may change or reject a
// message: it stores what reaches it.
//
// AddHook (Init) reads the stored inflight messages and pending publishes,
// and Serve's Stored* events the rest, all before the server listens: a
// store holding many large inflight messages delays the start by the time
// to read them (kdb-mqtt logs the time in both as store_read_time).
//
// # What an acknowledgement means
//
// mochi writes a publisher's PUBACK (PUBREC for QoS 2) before it hands the
// message to the subscribers, and so before any storage hook hears of the
// subscribers' copies (OnQosPublish); it writes CONNACK, SUBACK and UNSUBACK
// after the events that store what they acknowledge, without waiting for a
// hook. A storage hook that writes in those events therefore acknowledges
// what may not be on disk, whatever its sync setting. This hook holds every
// acknowledgement until what it acknowledges is durable (OnPacketEncode, the
// last event before a packet is written):
//
//   - OnPublish (before the ack) stores the message as a pending publish
//     (index "pub"), with the PUBREC state of its packet ID for QoS 2 and,
//     for a retained publish, its retained state in the same commit: a
//     reference to the pending record (or the removal of the topic's
//     retained message, for an empty payload). OnRetainMessage then stores
//     or removes the retained copy (the server's retained message of the
//     topic as it is at the event: mochi's updates and events of two
//     publishers can come in other orders); the PUBACK or PUBREC waits for
//     both. A crash between the two commits leaves the message both
//     published again at the start and retained (load turns a reference
//     it finds into the message): an unacknowledged retained publish is
//     there wholly or not at all, never published again without being
//     retained, nor retained without being published.
//   - The subscribers' inflight copies (OnQosPublish during the fan-out) are
//     gathered and committed at OnPublished in one transaction that also
//     removes the pending publish: after a crash either the pending publish
//     is there, and OnStarted publishes it again to the subscribers of the
//     restarted server, or its whole fan-out is. A fan-out larger than one
//     commit can hold (kdb's DB.MaxBatchSize: a large message to many
//     subscribers) is split into parts, each committed with a fan-out
//     record naming its copies (index "fan"), then a last commit removes
//     the pending publish and those records; every copy is sent only once
//     the last commit is applied, and the publisher's PUBACK was already
//     waiting for the pending publish only, which stays until the last
//     commit. A crash between the parts keeps a prefix of them (the hook
//     submits them in turn, nothing of its own between them); at start,
//     the copies named by the fan-out records of a pending publish still
//     stored are removed before it is published again, so no subscriber
//     gets it twice or loses it. That commit is NoSync (the
//     next synced commit carries it). A QoS 2 PUBLISH to a subscriber waits
//     until its inflight record is durable (DB.Sync), so a QoS 2 message a
//     client received is redelivered with its packet ID, never published
//     anew: it is delivered once. A QoS 1 PUBLISH waits until the record
//     is applied only: if a crash loses it, the pending publish is still
//     on disk and is published again (a duplicate, as QoS 1 allows).
//   - A PUBREL to a subscriber waits for its PUBREL state; a PUBCOMP to a
//     publisher waits for the removal of the PUBREC state of its packet ID;
//     CONNACK, SUBACK and UNSUBACK wait for the session and subscription
//     writes of their client.
//   - Removals of completed inflight messages, of expired sessions and the
//     server counters are not synced (a lost removal redelivers a QoS 1
//     message, as QoS 1 allows; a QoS 2 message is by then in its PUBREL
//     state, whose resend delivers nothing).
//
// Writes are kdb's ordered commits (Submit): queued in event order, they
// share fsyncs across clients, and a publisher's next message is read and
// stored while the previous fan-out's commit is being synced; no event
// waits for a disk except the packets above. If a write fails, the packet
// that would acknowledge it is not sent: the hook closes the connection.
//
// # Writes the store refuses, and a failed store
//
// A write the store refuses for its input (kdb.ErrInvalid: a value over
// kdb.MaxValueSize, a commit over DB.MaxBatchSize) is refused for its own
// client or message, never for the hook. A message the hook would store
// (QoS 1 or 2, or retained) whose record, with room for a subscriber's copy
// (64 KiB for its client ID, or a quarter of MaxBatchSize if less), would
// not fit one commit is refused in OnPublish before anything is written:
// an MQTT 5 QoS 1 publisher gets a PUBACK with reason code 0x97 (quota
// exceeded) and stays connected; any other publisher is disconnected
// (DISCONNECT 0x95, packet too large, in MQTT 5). With kdb's defaults the
// limit is a record of 8,321,408 bytes (8 MiB less 66 KiB and 640 bytes):
// the payload, topic, properties and publisher's client ID, and about 20
// bytes of framing. A session record
// too large (a will of megabytes) refuses its client's CONNACK if the
// session outlives the connection. Each is logged at warning level.
//
// Writes that grow with a session, not with one message, are split into
// commits that each fit DB.MaxBatchSize, submitted in turn (a crash keeps
// a prefix of them), the acknowledgement waiting for the last: the
// subscriptions of one SUBSCRIBE, the removals of one UNSUBSCRIBE or of
// every subscription of a session that ends (a clean-session disconnect,
// a clean start over a stored session), the removal of an expired session
// (its client record last, so that a crash leaves it to expire again), and
// the inflight removals of a session whose messages are dropped at once.
//
// A store that fails (a write or fsync error: the kdb handle fails) makes
// the hook refuse every acknowledgement that depends on a write from then
// on: CONNACK of a session that outlives its connection, SUBACK, UNSUBACK,
// PUBACK, PUBREC, PUBCOMP, PUBREL, and QoS 1 and 2 PUBLISH to subscribers,
// each by closing the connection. Hook.Err reports the failure, and Stop
// returns it; kdb-mqtt exits 1 after it.
//
// # kdb's broker store or the key-value API
//
// Everything is in the key-value API, in namespace "mq" (Namespace): the
// broker store's semantics do not fit here, for these reasons.
//
//   - Inflight messages per client as a broker queue: mochi keys inflight
//     messages by packet ID, replaces them under the same ID, and moves a
//     QoS 2 message from PUBLISH to PUBREL in place; a queue appends under
//     its own sequence numbers and removes by them, so each replacement
//     would be an Ack and a Send in a broker transaction, keyed through a
//     second map of packet IDs to sequences.
//   - Acks: every broker write (Send, Ack, Tx.Commit) waits for its fsync,
//     except AckAsync, and the broker has no unwaited transaction. The
//     fan-out commit (a message's copies for N clients plus the removal of
//     its pending record, atomically) runs in the publisher's goroutine right
//     after mochi sent the PUBACK, and the removals in the subscribers'
//     read goroutines: waiting there would cost one fsync per message per
//     client on paths that must not wait, where Submit queues the commit
//     and lets the next message's fsync carry it.
//   - Durable subscriptions: an MQTT subscription is a topic filter with
//     wildcards matched by mochi, not a named destination.
//
// The indexes (values are mochi's storage types: storage.Message in the
// hook's binary encoding, records.go's encodeMessage, with the JSON an
// earlier version wrote read too; the others in their JSON):
//
//	cl   client ID                     → storage.Client
//	sub  client ID, 0, filter          → storage.Subscription
//	ret  topic                         → storage.Message (retained), or a reference: 0x02, pending sequence (8 bytes, BE)
//	if   client ID, 0, packet ID (BE)  → storage.Message (inflight: PUBLISH, PUBREC or PUBREL state)
//	pub  sequence (8 bytes, BE)        → storage.Message (acknowledged, fan-out not yet committed)
//	fan  sequence, part (4 bytes, BE)  → inflight keys (a split fan-out's part, until its last commit)
//	sys  "info"                        → storage.SystemInfo
//
// A client ID longer than 200 bytes, or a filter or topic longer than 300,
// is keyed by its SHA-256 (the value keeps the name). A fan-out record's
// value is a uvarint count, then each inflight key as a uvarint length and
// its bytes (records.go's encodeKeyList). The index is new with split
// fan-outs: a store written before has none, and reads as before; a store
// with fan-out records left by a crash must not be opened by an earlier
// version of the hook, which would deliver the copies they name besides
// publishing the message again. A retained reference is new too: an
// earlier version skips one a crash left as a malformed record (logged),
// and the message it stands for is published again but not retained.
//
// # Bad records
//
// A stored record that does not decode, lacks what the server needs, or
// whose value kdb cannot read (kdb.ErrCorrupt) is logged at error level
// ("kdbmqtt: skipping a malformed stored record", with its index and key)
// and skipped; the server starts with the others. What only a skipped
// record gave a use to is removed at the start, not kept:
//
//   - A client record skipped: the server restores no session for it, so
//     its subscriptions and inflight messages are not handed out (mochi
//     would put the subscriptions in its topic tree with no session) and
//     are removed with the record, each client logged at error level with
//     how many of each. They are valid records, but of a session that no
//     longer exists: the client's next CONNECT is told no session is
//     present and, by MQTT's rules, starts anew and subscribes again; no
//     tool repairs a client record; and kept, they became the new
//     session's at the restart after its CONNECT stored a good record
//     (subscriptions it never made, the old session's messages), or
//     stayed stored for good.
//   - A fan-out record skipped: it is removed. Its copies stay. If its
//     pending publish is stored, the copies it named cannot be told from
//     other inflight messages (removing look-alikes could lose an
//     acknowledged message): the message is published again and those
//     subscribers may get it twice, which is logged at error level with
//     the publish's sequence.
//   - A retained reference whose pending publish is not stored (or was
//     skipped) is removed.
//
// Other skipped records (a pending publish, an inflight message, a
// retained message, a subscription of a good client) stay stored and are
// skipped at every start: nothing else refers to them, and a pending
// publish is the only copy of an acknowledged message.
//
// # What differs from mochi's own hooks
//
// Besides the acknowledgements above: refused subscriptions (reason code
// 0x80 and up) are not stored; the session-expiry flag is stored, so an
// expired session stays expired after a restart (but an expiry interval
// counts from the broker's start, not from the disconnect: mochi's stored
// client has no disconnect time, so the time the broker was down does not
// count); an expired session's subscriptions and inflight
// messages are removed with it; subscriptions and inflight messages of a
// client with no stored session (a session that ended with its connection
// when the process was killed: mochi ends it at the start before it loads
// them) are removed at the start, not handed to the server, which would
// put the subscriptions in its topic tree for any later client of that ID;
// a clean start over a stored session (or an MQTT 3.1.1 clean
// session over a connected one) removes that session's subscriptions and
// inflight messages in the commit of the new session record, which the
// CONNACK waits for (mochi reports the inflight messages dropped after
// that event, and a removal queued then, unsynced, came back after a
// crash); a session expiry interval changed by an MQTT 5 DISCONNECT is
// stored (not synced: a DISCONNECT has no ack); retained and inflight
// messages with an MQTT 5 expiry interval get their expiry time back at
// a start (storage.Message has none: mochi loaded them never to expire,
// restoreExpiry); removing a retained
// message that was not there writes a removal, not an empty retained message; a resumed
// session keeps its inflight records (mochi moves the messages to the new
// client and reports them dropped from the old one: OnQosDropped on a
// client taken over is ignored); a connection made while OnStarted
// publishes the pending messages again waits until it is done; a
// connection resuming a session waits (at most 2 s) for the fan-outs in
// progress, which mochi starts after the PUBACK, so that a message
// acknowledged before the CONNECT is on the old client object when the
// new one clones it; message records are in a binary encoding, not JSON.
package kdbmqtt
