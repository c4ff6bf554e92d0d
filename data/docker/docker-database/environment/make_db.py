import sqlite3, sys, os
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
db = sqlite3.connect(sys.argv[1])
db.execute('create table stock (item text primary key, count int)')
db.executemany('insert into stock values (?, ?)', [('belt', 17), ('bolt', 78), ('clamp', 11), ('fuse', 46), ('gear', 68), ('hose', 82), ('pump', 39), ('relay', 23)])
db.commit()
