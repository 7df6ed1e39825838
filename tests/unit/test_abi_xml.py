# ruff: noqa: E501  (abidw writes one element per line; the fixture keeps its shape)
"""The public-surface cut of abidw's XML: exported declarations, the types they reach, and
types defined outside the public header made opaque, with no source locations."""

from __future__ import annotations

import re

import pytest

from eliza.formats.abi_xml import AbiXmlError, architecture_of, public_surface, soname_of

HEADER = "api.h"
ABIXML = """<abi-corpus version='2.1' architecture='elf-amd-x86_64' soname='libx.so.3'>
  <elf-needed><dependency name='libc.so.6'/></elf-needed>
  <elf-function-symbols>
    <elf-symbol name='x_open' type='func-type' binding='global-binding' visibility='default-visibility' is-defined='yes'/>
    <elf-symbol name='helper' type='func-type' binding='global-binding' visibility='default-visibility' is-defined='yes'/>
  </elf-function-symbols>
  <abi-instr address-size='64' path='/src/x.cpp' language='LANG_C_plus_plus_14'>
    <type-decl name='int' size-in-bits='32' id='t-int'/>
    <typedef-decl name='int32_t' type-id='t-int' filepath='/usr/include/stdint.h' line='1' column='1' id='t-i32'/>
    <class-decl name='x_config' size-in-bits='64' is-struct='yes' visibility='default' filepath='/src/include/api.h' line='9' column='1' id='t-config'>
      <data-member access='public' layout-offset-in-bits='0'>
        <var-decl name='size' type-id='t-i32' visibility='default' filepath='/src/include/api.h' line='10' column='1'/>
      </data-member>
      <data-member access='public' layout-offset-in-bits='32'>
        <var-decl name='mode' type-id='t-mode' visibility='default' filepath='/src/include/api.h' line='11' column='1'/>
      </data-member>
    </class-decl>
    <enum-decl name='x_mode' filepath='/src/include/api.h' line='5' column='1' id='t-mode'>
      <underlying-type type-id='t-int'/>
      <enumerator name='X_FAST' value='0'/>
    </enum-decl>
    <class-decl name='Handle' size-in-bits='256' is-struct='yes' visibility='default' filepath='/src/private.h' line='3' column='1' id='t-handle'>
      <data-member access='private' layout-offset-in-bits='0'>
        <var-decl name='items' type-id='t-vector' visibility='default'/>
      </data-member>
    </class-decl>
    <class-decl name='vector' size-in-bits='192' visibility='default' filepath='/usr/include/c++/12/vector' line='1' column='1' id='t-vector'/>
    <class-decl name='anon' size-in-bits='32' is-struct='yes' visibility='default' id='t-anon'>
      <data-member access='public' layout-offset-in-bits='0'><var-decl name='v' type-id='t-int' visibility='default'/></data-member>
    </class-decl>
    <pointer-type-def type-id='t-handle' size-in-bits='64' id='t-handle-ptr'/>
    <pointer-type-def type-id='t-config' size-in-bits='64' id='t-config-ptr'/>
    <pointer-type-def type-id='t-anon' size-in-bits='64' id='t-anon-ptr'/>
    <function-decl name='x_open' mangled-name='x_open' filepath='/src/x.cpp' line='20' column='1' visibility='default' binding='global' size-in-bits='64' elf-symbol-id='x_open'>
      <parameter type-id='t-config-ptr' name='config' filepath='/src/x.cpp' line='20' column='1'/>
      <parameter type-id='t-anon-ptr' name='extra' filepath='/src/x.cpp' line='20' column='1'/>
      <return type-id='t-handle-ptr'/>
    </function-decl>
    <function-decl name='helper' mangled-name='helper' filepath='/src/x.cpp' line='30' column='1' visibility='default' binding='global' size-in-bits='64' elf-symbol-id='helper'>
      <return type-id='t-vector'/>
    </function-decl>
  </abi-instr>
</abi-corpus>
"""


def cut(text: str = ABIXML) -> str:
    return public_surface(text, prefix="x_", public_header=HEADER)


def test_the_surface_keeps_the_exported_declarations_and_the_public_types_they_reach() -> None:
    out = cut()
    assert 'name="x_open"' in out and "helper" not in out
    assert 'name="x_config"' in out and 'name="size"' in out and 'name="mode"' in out
    assert 'name="X_FAST"' in out and 'name="int32_t"' in out  # through the member types
    assert "libc.so.6" not in out  # dependencies are not the exported surface


def test_types_defined_outside_the_header_are_opaque() -> None:
    out = cut()
    opaque = r'<class-decl name="Handle" is-struct="yes" visibility="default" id="t[0-9a-f]{12}" is-declaration-only="yes" />'
    assert re.search(opaque, out), out
    assert "items" not in out and "vector" not in out  # not followed into the private definition


def test_an_aggregate_without_a_location_is_kept_whole() -> None:
    assert 'name="anon"' in cut() and 'name="v"' in cut()


def test_no_source_locations_and_the_same_bytes_every_time() -> None:
    out = cut()
    assert "filepath" not in out and "line=" not in out and "/src/" not in out
    moved = ABIXML.replace("/src/", "/elsewhere/checkout/")
    assert cut(moved) == out


def test_abidw_type_ids_do_not_matter() -> None:
    # abidw's hashed ids move when an unrelated type collides with them: no ABI change.
    renumbered = ABIXML.replace("'t-int'", "'t-int-2'").replace("'t-config'", "'t-77'")
    assert cut(renumbered) == cut()


def test_a_changed_member_changes_the_surface() -> None:
    changed = ABIXML.replace("name='size' type-id='t-i32'", "name='size' type-id='t-int'")
    assert cut(changed) != cut()


def test_facts_and_errors() -> None:
    assert architecture_of(cut()) == "elf-amd-x86_64" and soname_of(cut()) == "libx.so.3"
    with pytest.raises(AbiXmlError, match="not XML"):
        cut("<abi-corpus")
    with pytest.raises(AbiXmlError, match="<html>"):
        cut("<html/>")
    with pytest.raises(AbiXmlError, match="no declaration of an exported y_"):
        public_surface(ABIXML, prefix="y_", public_header=HEADER)
