# Turns schema/*.sql into a C++ source, so the .sql files stay the single
# source of the DDL. Run at build time: cmake -DSCHEMA_DIR=... -DOUTPUT=... -P embed_schema.cmake
set(body "// Generated from schema/*.sql by cmake/embed_schema.cmake. Do not edit.\n")
string(APPEND body "#include \"detail/dialect.hpp\"\n\nnamespace sqlock::detail {\n\n")
string(APPEND body "std::string_view embedded_schema(sqlock::engine e) noexcept {\n    switch (e) {\n")
foreach(engine postgresql mysql sqlite)
    file(READ "${SCHEMA_DIR}/${engine}.sql" sql)
    string(APPEND body "        case sqlock::engine::${engine}:\n            return R\"sqlock_schema(${sql})sqlock_schema\";\n")
endforeach()
string(APPEND body "    }\n    return {};\n}\n\n}  // namespace sqlock::detail\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
