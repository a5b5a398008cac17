package requests

// Op is one request of a stream, 16 bytes. An allocation has Size > 0; a free has Size 0 and names
// the block by Slot; an op whose Slot is NoSlot is no request, only the sync point of an event that
// asked nothing of the allocator. Slot indexes the table of live blocks: each live block has a slot
// of its own, reused once it is freed, so slots stay below the most blocks live at once. The stream
// index (into the stream handles) and whether the program synchronized with the device right after
// the op share the last word.
type Op struct {
	Size   uint64
	Slot   uint32
	stream uint32
}

// NoSlot is the slot of an op that is only a sync point.
const NoSlot = ^uint32(0)

// syncBit marks an op after which the program synchronized with the device.
const syncBit = 1 << 31

// MaxStreams is the most streams a stream can use.
const MaxStreams = syncBit - 1

// NewOp returns the op of an allocation (size > 0) or a free (size 0) of slot on the stream of
// index stream, with the sync point or not.
func NewOp(size uint64, slot, stream uint32, syncs bool) Op {
	o := Op{Size: size, Slot: slot, stream: stream}
	if syncs {
		o.stream |= syncBit
	}
	return o
}

// IsAlloc reports whether o is an allocation.
func (o Op) IsAlloc() bool { return o.Size > 0 }

// IsFree reports whether o frees the block of its slot.
func (o Op) IsFree() bool { return o.Size == 0 && o.Slot != NoSlot }

// StreamIndex returns the index of the op's stream among the stream handles.
func (o Op) StreamIndex() uint32 { return o.stream &^ syncBit }

// Syncs reports whether the program synchronized with the device right after the op.
func (o Op) Syncs() bool { return o.stream&syncBit != 0 }
