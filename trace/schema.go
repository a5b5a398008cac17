package trace

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// Indices of the columns in the schema written by Writer.
const (
	colSeq = iota
	colTimeNs
	colDurationNs
	colPID
	colTID
	colDevice
	colOp
	colMemory
	colLayer
	colFunction
	colSize
	colAddress
	colHandle
	colStream
	colResult
	colCallsite
	colPool // optional when reading: traces from before record --pool lack it
	numColumns
)

// Field metadata keys.
const (
	fieldUnitKey        = "unit"
	fieldDescriptionKey = "description"
)

// The dictionary types of the string columns. op, memory and layer index a fixed dictionary
// whose entry i is the name of the enum value i; function indexes the Writer's function list.
var (
	smallDictType    = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	functionDictType = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}
)

// columnSpec describes one column of the trace layout.
type columnSpec struct {
	name        string
	typ         arrow.DataType
	unit        string
	description string
}

var columnSpecs = [numColumns]columnSpec{
	{"seq", arrow.PrimitiveTypes.Uint64, "", "global order of the event across all threads and processes"},
	{"time_ns", arrow.PrimitiveTypes.Int64, "ns", "monotonic clock at the start of the call (epoch time for imported traces)"},
	{"duration_ns", arrow.PrimitiveTypes.Int64, "ns", "time spent in the real call, 0 when unknown"},
	{"pid", arrow.PrimitiveTypes.Uint32, "", "process id"},
	{"tid", arrow.PrimitiveTypes.Uint32, "", "kernel thread id"},
	{"device", arrow.PrimitiveTypes.Int32, "", "CUDA device ordinal, -1 when unknown"},
	{"op", smallDictType, "", "operation: " + joinNames(opNames[:])},
	{"memory", smallDictType, "", "memory kind: " + joinNames(memoryNames[:])},
	{"layer", smallDictType, "", "API layer the program entered by: " + joinNames(layerNames[:])},
	{"function", functionDictType, "", "entry point the program called, e.g. cudaMallocAsync, cuMemAlloc_v2, torch.alloc"},
	{"size", arrow.PrimitiveTypes.Uint64, "bytes", "requested bytes for allocations, freed bytes for frees, 0 when unknown"},
	{"address", arrow.PrimitiveTypes.Uint64, "", "returned or freed device address; the handle for create/release"},
	{"handle", arrow.PrimitiveTypes.Uint64, "", "physical-memory handle of a map, 0 otherwise"},
	{"stream", arrow.PrimitiveTypes.Uint64, "", "CUDA stream of stream-ordered calls, 0 for the legacy default stream"},
	{"result", arrow.PrimitiveTypes.Int32, "", "CUDA result code of the real call, 0 is success"},
	{"callsite", arrow.PrimitiveTypes.Uint64, "", "return address of the program's call, 0 when unknown"},
	{"pool", arrow.PrimitiveTypes.Uint8, "", "1 when allocscope's pool inside the program served the call (record --pool), 0 when CUDA did"},
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

// schemaFor returns the Arrow schema of a trace with the given metadata.
func schemaFor(info Info) *arrow.Schema {
	fields := make([]arrow.Field, numColumns)
	for i, c := range columnSpecs {
		keys := []string{fieldDescriptionKey}
		values := []string{c.description}
		if c.unit != "" {
			keys = append(keys, fieldUnitKey)
			values = append(values, c.unit)
		}
		fields[i] = arrow.Field{Name: c.name, Type: c.typ, Metadata: arrow.NewMetadata(keys, values)}
	}
	md := info.metadata()
	return arrow.NewSchema(fields, &md)
}

// resolveColumns finds the required columns in schema by name and checks their types.
// It returns, for each column of the layout, its index in schema.
func resolveColumns(schema *arrow.Schema) ([numColumns]int, error) {
	var idx [numColumns]int
	for i, c := range columnSpecs {
		found := schema.FieldIndices(c.name)
		if len(found) == 0 && i == colPool {
			idx[i] = -1
			continue
		}
		if len(found) == 0 {
			return idx, fmt.Errorf("column %q is missing", c.name)
		}
		f := schema.Field(found[0])
		if err := checkColumnType(c, f.Type); err != nil {
			return idx, err
		}
		idx[i] = found[0]
	}
	return idx, nil
}

func checkColumnType(c columnSpec, got arrow.DataType) error {
	if _, isDict := c.typ.(*arrow.DictionaryType); isDict {
		if isStringType(got) {
			return nil
		}
		if d, ok := got.(*arrow.DictionaryType); ok && arrow.IsInteger(d.IndexType.ID()) && isStringType(d.ValueType) {
			return nil
		}
		return fmt.Errorf("column %q has type %s, want a string or dictionary of strings", c.name, got)
	}
	if !arrow.TypeEqual(got, c.typ) {
		return fmt.Errorf("column %q has type %s, want %s", c.name, got, c.typ)
	}
	return nil
}

func isStringType(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		return true
	}
	return false
}
