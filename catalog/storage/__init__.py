"""Bytes and places: reading and writing files on local disk, S3, Azure and GCS (``backends``,
``azure``, ``gcs``, bounded by ``bounds``), metadata files and Avro manifests (``metadata_files``,
``manifests``), credentials handed to clients (``vending``, ``cloud_vending``), S3 request signing
(``signing``) and deleting a dropped table's files (``purge``). Reaches nothing of ``database/``.
"""
