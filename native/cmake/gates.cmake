# The gates of this build, from matrix.yaml. CMake cannot read YAML, so conanfile.py reads
# the matrix and passes its gates as ELIZA_GATE_TABLE, one list item per gate:
#
#     <gate id>|<CMake option>|<factory name>|<preference rank>|<artifact>,<artifact>...
#
# Everything else follows from that table, per gate: its option (default OFF; Conan sets it
# per cell), its source native/src/backends/<gate id>.cpp, its GateSpec and registration
# (the generated builtin_backends.inc) and its entry in build-info.json's "gates". Nothing
# in native/ names a gate; adding one is a matrix.yaml entry plus that one source file
# (docs/adding-a-gate.md).

set(ELIZA_GATE_TABLE "" CACHE STRING
    "The gates of matrix.yaml as conanfile.py passes them (see native/cmake/gates.cmake)")

# Configures every gate of ELIZA_GATE_TABLE for `target` and writes
# <generated_dir>/builtin_backends.inc. Sets out_gate_ids to the ids of the gates that are ON.
function(eliza_configure_gates target generated_dir out_gate_ids)
    set(how_to "see docs/adding-a-gate.md")
    set(table_origin "ELIZA_GATE_TABLE (conanfile.py writes it from matrix.yaml's gates)")
    set(gate_options "")
    set(gate_ids "")
    set(declarations "")
    set(specs "")
    set(entries "")
    set(gate_count 0)
    foreach(row IN LISTS ELIZA_GATE_TABLE)
        string(REPLACE "|" ";" fields "${row}")
        list(LENGTH fields field_count)
        if(NOT field_count EQUAL 5)
            message(FATAL_ERROR "${table_origin}: row '${row}' has ${field_count} fields, expected "
                "<gate id>|<CMake option>|<factory name>|<preference rank>|<artifact>,... "
                "(rerun the build through nox/Conan so conanfile.py writes the table)")
        endif()
        list(GET fields 0 id)
        list(GET fields 1 option)
        list(GET fields 2 factory)
        list(GET fields 3 rank)
        list(GET fields 4 artifact_field)
        set(where "matrix.yaml gate '${id}'")

        # The id names the source file and, with '-' as '_', the factory function.
        string(REPLACE "-" "_" cid "${id}")
        if(NOT cid MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
            message(FATAL_ERROR "${where}: the id must be a C identifier once '-' becomes '_' "
                "('${cid}' is not; it names the factory function <id>_factory). Rename the gate.")
        endif()
        if(NOT option MATCHES "^ELIZA_ENABLE_[A-Z0-9_]+$")
            message(FATAL_ERROR "${where}: cmake_option '${option}' must match ELIZA_ENABLE_[A-Z0-9_]+")
        endif()
        if(NOT factory MATCHES "^[a-z0-9][a-z0-9.-]*$")
            message(FATAL_ERROR "${where}: factory '${factory}' must match [a-z0-9][a-z0-9.-]*")
        endif()
        if(NOT rank MATCHES "^-?[0-9]+$")
            message(FATAL_ERROR "${where}: preference_rank '${rank}' must be an integer")
        endif()
        string(REPLACE "," ";" artifacts "${artifact_field}")
        if(artifacts STREQUAL "")
            message(FATAL_ERROR "${where}: artifacts is empty; list at least one pattern")
        endif()
        # The forms seam::bundle_has_artifact implements; any other would never match.
        foreach(artifact IN LISTS artifacts)
            if(NOT artifact MATCHES "^[A-Za-z0-9_.+@/*-]+$"
               OR NOT artifact MATCHES "^[^*]+/(\\*[^*/]+|[^*/]+/?)$")
                message(FATAL_ERROR "${where}: artifact '${artifact}' is not one of the supported "
                    "forms text/*.ext (an entry named *.ext), text/name/ (a directory) or "
                    "text/name (a file), using letters, digits and _.+@- only")
            endif()
        endforeach()

        option(${option} "Compile in and register the ${id} backend (factory ${factory}); default OFF" OFF)
        list(APPEND gate_options ${option})
        if(NOT ${option})
            continue()
        endif()

        set(source "${CMAKE_CURRENT_SOURCE_DIR}/src/backends/${id}.cpp")
        if(NOT EXISTS "${source}")
            message(FATAL_ERROR "${where} is ON (${option}) but its factory file "
                "native/src/backends/${id}.cpp does not exist. Write that file: it defines "
                "eliza::backends::${cid}_factory(const GateSpec &), returning the gate's "
                "factory singleton (a GateFactory with available() and open()); ${how_to}. "
                "Or turn the gate off in this cell.")
        endif()
        target_sources(${target} PRIVATE "${source}")

        list(LENGTH artifacts artifact_count)
        list(TRANSFORM artifacts PREPEND "\"")
        list(TRANSFORM artifacts APPEND "\"")
        list(JOIN artifacts ", " artifact_literals)
        string(APPEND declarations "LlmBackendFactory & ${cid}_factory(const GateSpec & spec);  // native/src/backends/${id}.cpp\n")
        string(APPEND specs
            "constexpr const char * k_${cid}_artifacts[] = {${artifact_literals}};\n"
            "constexpr GateSpec k_${cid}_spec{\"${id}\", \"${factory}\", k_${cid}_artifacts, ${artifact_count}, ${rank}};\n")
        string(APPEND entries "        {&k_${cid}_spec, &${cid}_factory(k_${cid}_spec)},\n")
        list(APPEND gate_ids "${id}")
        math(EXPR gate_count "${gate_count} + 1")
    endforeach()

    # An ELIZA_ENABLE_* that is ON but belongs to no gate of the table (a hand-made
    # configure, or a gate since removed from the matrix) would build a cell without the
    # backend it asked for, silently; refuse instead.
    get_cmake_property(cache_variables CACHE_VARIABLES)
    foreach(variable IN LISTS cache_variables)
        if(variable MATCHES "^ELIZA_ENABLE_" AND ${variable} AND NOT variable IN_LIST gate_options)
            message(FATAL_ERROR "${variable} is ON but no gate of ${table_origin} has that option, "
                "so no backend would be compiled for it. Declare the gate in matrix.yaml and build "
                "through nox/Conan, or turn ${variable} off (or delete this build folder).")
        endif()
    endforeach()

    if(gate_count EQUAL 0)
        set(array_init "{}")
        set(gate_list "none")
    else()
        set(array_init "{{\n${entries}    }}")
        list(JOIN gate_ids ", " gate_list)
    endif()
    file(CONFIGURE OUTPUT "${generated_dir}/builtin_backends.inc" CONTENT [=[
// GENERATED at configure time by native/cmake/gates.cmake from ELIZA_GATE_TABLE, which
// conanfile.py writes from matrix.yaml: do not edit; edit matrix.yaml.
// Gates ON in this build: @gate_list@.
namespace eliza::backends {

@declarations@
namespace {

@specs@
std::array<BuiltinGate, @gate_count@> make_builtin_gates() {
    return @array_init@;
}

}  // namespace
}  // namespace eliza::backends
]=] @ONLY)
    set(${out_gate_ids} "${gate_ids}" PARENT_SCOPE)
endfunction()
