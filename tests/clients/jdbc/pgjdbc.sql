-- A generic JDBC tool over pgjdbc (DataGrip, SQuirreL, Airflow's JDBC hook...): the driver's connect-time statements, then java.sql.DatabaseMetaData's calls
-- in the order a tool browsing schema sales makes them. Built from pgjdbc's source: each
-- statement is the driver's string concatenation for a server reporting 9.5.0, as pgjdbc
-- sends it: extended protocol (Parse/Bind/Describe/Execute), setString parameters typed
-- varchar, setInt int4, setLong int8 ($n is pgjdbc's rewrite of ?).
-- startup: {"user": "materialize", "database": "materialize", "client_encoding": "UTF8", "DateStyle": "ISO", "TimeZone": "UTC"}
-- startup source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java getParametersForStartup (TimeZone is the JVM's zone: UTC here)

-- query: pgjdbc connect: runInitialQueries
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java runInitialQueries: a server below 12 (mzflow reports 9.5.0) gets extra_float_digits = 3; application_name is sent here because assumeMinServerVersion is unset; one simple-protocol Query
-- protocol: simple
SET extra_float_digits = 3;SET application_name = 'PostgreSQL JDBC Driver';

-- query: getCatalog()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java getCatalog
-- protocol: extended
select current_catalog;

-- query: getSchema()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java getSchema
-- protocol: extended
select current_schema();

-- query: getTransactionIsolation()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java getTransactionIsolation
-- protocol: extended
SHOW TRANSACTION ISOLATION LEVEL;

-- query: getSQLKeywords()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getSQLKeywords (server 9.0 and later)
-- protocol: extended
select string_agg(word, ',') from pg_catalog.pg_get_keywords() where word <> ALL ('{a,abs,absolute,action,ada,add,admin,after,all,allocate,alter,always,and,any,are,array,as,asc,asensitive,assertion,assignment,asymmetric,at,atomic,attribute,attributes,authorization,avg,before,begin,bernoulli,between,bigint,binary,blob,boolean,both,breadth,by,c,call,called,cardinality,cascade,cascaded,case,cast,catalog,catalog_name,ceil,ceiling,chain,char,char_length,character,character_length,character_set_catalog,character_set_name,character_set_schema,characteristics,characters,check,checked,class_origin,clob,close,coalesce,cobol,code_units,collate,collation,collation_catalog,collation_name,collation_schema,collect,column,column_name,command_function,command_function_code,commit,committed,condition,condition_number,connect,connection_name,constraint,constraint_catalog,constraint_name,constraint_schema,constraints,constructors,contains,continue,convert,corr,corresponding,count,covar_pop,covar_samp,create,cross,cube,cume_dist,current,current_collation,current_date,current_default_transform_group,current_path,current_role,current_time,current_timestamp,current_transform_group_for_type,current_user,cursor,cursor_name,cycle,data,date,datetime_interval_code,datetime_interval_precision,day,deallocate,dec,decimal,declare,default,defaults,deferrable,deferred,defined,definer,degree,delete,dense_rank,depth,deref,derived,desc,describe,descriptor,deterministic,diagnostics,disconnect,dispatch,distinct,domain,double,drop,dynamic,dynamic_function,dynamic_function_code,each,element,else,end,end-exec,equals,escape,every,except,exception,exclude,excluding,exec,execute,exists,exp,external,extract,false,fetch,filter,final,first,float,floor,following,for,foreign,fortran,found,free,from,full,function,fusion,g,general,get,global,go,goto,grant,granted,group,grouping,having,hierarchy,hold,hour,identity,immediate,implementation,in,including,increment,indicator,initially,inner,inout,input,insensitive,insert,instance,instantiable,int,integer,intersect,intersection,interval,into,invoker,is,isolation,join,k,key,key_member,key_type,language,large,last,lateral,leading,left,length,level,like,ln,local,localtime,localtimestamp,locator,lower,m,map,match,matched,max,maxvalue,member,merge,message_length,message_octet_length,message_text,method,min,minute,minvalue,mod,modifies,module,month,more,multiset,mumps,name,names,national,natural,nchar,nclob,nesting,new,next,no,none,normalize,normalized,not,"null",nullable,nullif,nulls,number,numeric,object,octet_length,octets,of,old,on,only,open,option,options,or,order,ordering,ordinality,others,out,outer,output,over,overlaps,overlay,overriding,pad,parameter,parameter_mode,parameter_name,parameter_ordinal_position,parameter_specific_catalog,parameter_specific_name,parameter_specific_schema,partial,partition,pascal,path,percent_rank,percentile_cont,percentile_disc,placing,pli,position,power,preceding,precision,prepare,preserve,primary,prior,privileges,procedure,public,range,rank,read,reads,real,recursive,ref,references,referencing,regr_avgx,regr_avgy,regr_count,regr_intercept,regr_r2,regr_slope,regr_sxx,regr_sxy,regr_syy,relative,release,repeatable,restart,result,return,returned_cardinality,returned_length,returned_octet_length,returned_sqlstate,returns,revoke,right,role,rollback,rollup,routine,routine_catalog,routine_name,routine_schema,row,row_count,row_number,rows,savepoint,scale,schema,schema_name,scope_catalog,scope_name,scope_schema,scroll,search,second,section,security,select,self,sensitive,sequence,serializable,server_name,session,session_user,set,sets,similar,simple,size,smallint,some,source,space,specific,specific_name,specifictype,sql,sqlexception,sqlstate,sqlwarning,sqrt,start,state,statement,static,stddev_pop,stddev_samp,structure,style,subclass_origin,submultiset,substring,sum,symmetric,system,system_user,table,table_name,tablesample,temporary,then,ties,time,timestamp,timezone_hour,timezone_minute,to,top_level_count,trailing,transaction,transaction_active,transactions_committed,transactions_rolled_back,transform,transforms,translate,translation,treat,trigger,trigger_catalog,trigger_name,trigger_schema,trim,true,type,uescape,unbounded,uncommitted,under,union,unique,unknown,unnamed,unnest,update,upper,usage,user,user_defined_type_catalog,user_defined_type_code,user_defined_type_name,user_defined_type_schema,using,value,values,var_pop,var_samp,varchar,varying,view,when,whenever,where,width_bucket,window,with,within,without,work,write,year,zone}'::text[]);

-- query: getMaxNameLength()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getMaxNameLength
-- protocol: extended
SELECT t.typlen FROM pg_catalog.pg_type t, pg_catalog.pg_namespace n WHERE t.typnamespace=n.oid AND t.typname='name' AND n.nspname='pg_catalog';

-- query: getCatalogs()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getCatalogs
-- protocol: extended
SELECT datname AS "TABLE_CAT" FROM pg_catalog.pg_database WHERE datallowconn = true ORDER BY datname;

-- query: getSchemas(null, 'sal%')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getSchemas
-- protocol: extended
-- params: [["varchar", "sal%"]]
SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  AND nspname LIKE $1 ORDER BY "TABLE_SCHEM";

-- query: getSchemas()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getSchemas
-- protocol: extended
SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY "TABLE_SCHEM";

-- query: getTables(null, 'sales', '%', {TABLE, VIEW, MATERIALIZED VIEW})
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getTables, tableTypeClauses
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "%"]]
SELECT current_database() AS "TABLE_CAT", n.nspname AS "TABLE_SCHEM", c.relname AS "TABLE_NAME",  CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema'  WHEN true THEN CASE  WHEN n.nspname = 'pg_catalog' OR n.nspname = 'information_schema' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TABLE'   WHEN 'v' THEN 'SYSTEM VIEW'   WHEN 'i' THEN 'SYSTEM INDEX'   ELSE NULL   END  WHEN n.nspname = 'pg_toast' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TOAST TABLE'   WHEN 'i' THEN 'SYSTEM TOAST INDEX'   ELSE NULL   END  ELSE CASE c.relkind   WHEN 'r' THEN 'TEMPORARY TABLE'   WHEN 'p' THEN 'TEMPORARY TABLE'   WHEN 'i' THEN 'TEMPORARY INDEX'   WHEN 'S' THEN 'TEMPORARY SEQUENCE'   WHEN 'v' THEN 'TEMPORARY VIEW'   ELSE NULL   END  END  WHEN false THEN CASE c.relkind  WHEN 'r' THEN 'TABLE'  WHEN 'p' THEN 'PARTITIONED TABLE'  WHEN 'i' THEN 'INDEX'  WHEN 'P' then 'PARTITIONED INDEX'  WHEN 'S' THEN 'SEQUENCE'  WHEN 'v' THEN 'VIEW'  WHEN 'c' THEN 'TYPE'  WHEN 'f' THEN 'FOREIGN TABLE'  WHEN 'm' THEN 'MATERIALIZED VIEW'  ELSE NULL  END  ELSE NULL  END  AS "TABLE_TYPE", d.description AS "REMARKS",  '' as "TYPE_CAT", '' as "TYPE_SCHEM", '' as "TYPE_NAME", '' AS "SELF_REFERENCING_COL_NAME", '' AS "REF_GENERATION"  FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c  LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND d.objsubid = 0  and d.classoid = 'pg_class'::regclass)  WHERE c.relnamespace = n.oid  AND n.nspname LIKE $1 AND c.relname LIKE $2 AND (false  OR ( c.relkind = 'r' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' )  OR ( c.relkind = 'v' AND n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema' )  OR ( c.relkind = 'm' ) )  ORDER BY "TABLE_TYPE","TABLE_SCHEM","TABLE_NAME" ;

-- query: getColumns(null, 'sales', 'orders', '%')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getColumns (8.4 and later; no attidentity before 10, no attgenerated before 12)
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "orders"], ["varchar", "%"]]
SELECT * FROM (SELECT current_database() AS current_database, n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull  OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, null as attidentity,null as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND n.nspname LIKE $1 AND c.relname LIKE $2) c WHERE true  AND attname LIKE $3 ORDER BY nspname,c.relname,attnum ;

-- query: getColumns(null, 'sales', 'totals', '%')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getColumns
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "totals"], ["varchar", "%"]]
SELECT * FROM (SELECT current_database() AS current_database, n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull  OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, null as attidentity,null as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND n.nspname LIKE $1 AND c.relname LIKE $2) c WHERE true  AND attname LIKE $3 ORDER BY nspname,c.relname,attnum ;

-- query: getPrimaryKeys(null, 'sales', 'orders')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getPrimaryKeys
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "orders"]]
SELECT        result.TABLE_CAT AS "TABLE_CAT",        result.TABLE_SCHEM AS "TABLE_SCHEM",        result.TABLE_NAME AS "TABLE_NAME",        result.COLUMN_NAME AS "COLUMN_NAME",        result.KEY_SEQ AS "KEY_SEQ",        result.PK_NAME AS "PK_NAME"FROM      (SELECT current_database() AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(con.conkey)).n AS KEY_SEQ, con.conname AS PK_NAME,   information_schema._pg_expandarray(con.conkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_constraint con   JOIN pg_catalog.pg_class ct ON (con.conrelid = ct.oid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_attribute a ON (a.attrelid = ct.oid) WHERE con.contype = 'p'  AND n.nspname = $1 AND ct.relname = $2 ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq;

-- query: getImportedKeys: getMaxIndexKeys()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getMaxIndexKeys
-- protocol: extended
SELECT setting FROM pg_catalog.pg_settings WHERE name='max_index_keys';

-- query: getImportedKeys(null, 'sales', 'orders')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getImportedExportedKeys (9.0 and later: conindid; before 11: relkind 'i')
-- note: 32 is max_index_keys as the previous statement answers it
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "orders"]]
SELECT current_database() AS "PKTABLE_CAT", pkn.nspname AS "PKTABLE_SCHEM", pkc.relname AS "PKTABLE_NAME", pka.attname AS "PKCOLUMN_NAME", current_database() AS "FKTABLE_CAT", fkn.nspname AS "FKTABLE_SCHEM", fkc.relname AS "FKTABLE_NAME", fka.attname AS "FKCOLUMN_NAME", pos.n AS "KEY_SEQ", CASE con.confupdtype  WHEN 'c' THEN 0 WHEN 'n' THEN 2 WHEN 'd' THEN 4 WHEN 'r' THEN 1 WHEN 'p' THEN 1 WHEN 'a' THEN 3 ELSE NULL END AS "UPDATE_RULE", CASE con.confdeltype  WHEN 'c' THEN 0 WHEN 'n' THEN 2 WHEN 'd' THEN 4 WHEN 'r' THEN 1 WHEN 'p' THEN 1 WHEN 'a' THEN 3 ELSE NULL END AS "DELETE_RULE", con.conname AS "FK_NAME", pkic.relname AS "PK_NAME", CASE  WHEN con.condeferrable AND con.condeferred THEN 5 WHEN con.condeferrable THEN 6 ELSE 7 END AS "DEFERRABILITY"  FROM  pg_catalog.pg_namespace pkn, pg_catalog.pg_class pkc, pg_catalog.pg_attribute pka,  pg_catalog.pg_namespace fkn, pg_catalog.pg_class fkc, pg_catalog.pg_attribute fka,  pg_catalog.pg_constraint con,  pg_catalog.generate_series(1, 32) pos(n),  pg_catalog.pg_class pkic WHERE pkn.oid = pkc.relnamespace AND pkc.oid = pka.attrelid AND pka.attnum = con.confkey[pos.n] AND con.confrelid = pkc.oid  AND fkn.oid = fkc.relnamespace AND fkc.oid = fka.attrelid AND fka.attnum = con.conkey[pos.n] AND con.conrelid = fkc.oid  AND con.contype = 'f' AND pkic.relkind = 'i'  AND pkic.oid = con.conindid  AND fkn.nspname = $1 AND fkc.relname = $2 ORDER BY pkn.nspname,pkc.relname, con.conname,pos.n;

-- query: getIndexInfo(null, 'sales', 'orders', false, true)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getIndexInfo (8.3 and later; before 9.6: pg_am.amcanorder)
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "orders"]]
SELECT     tmp.TABLE_CAT AS "TABLE_CAT",     tmp.TABLE_SCHEM AS "TABLE_SCHEM",     tmp.TABLE_NAME AS "TABLE_NAME",     tmp.NON_UNIQUE AS "NON_UNIQUE",     tmp.INDEX_QUALIFIER AS "INDEX_QUALIFIER",     tmp.INDEX_NAME AS "INDEX_NAME",     tmp.TYPE AS "TYPE",     tmp.ORDINAL_POSITION AS "ORDINAL_POSITION",     trim(both '"' from pg_catalog.pg_get_indexdef(tmp.CI_OID, tmp.ORDINAL_POSITION, false)) AS "COLUMN_NAME",   CASE tmp.AM_CANORDER     WHEN true THEN CASE tmp.I_INDOPTION[tmp.ORDINAL_POSITION - 1] & 1::smallint       WHEN 1 THEN 'D'       ELSE 'A'     END     ELSE NULL   END AS "ASC_OR_DESC",     tmp.CARDINALITY AS "CARDINALITY",     tmp.PAGES AS "PAGES",     tmp.FILTER_CONDITION AS "FILTER_CONDITION",     tmp.REMARKS AS "REMARKS"FROM (SELECT current_database() AS TABLE_CAT,  n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, NOT i.indisunique AS NON_UNIQUE,   NULL AS INDEX_QUALIFIER, ci.relname AS INDEX_NAME,   CASE i.indisclustered     WHEN true THEN 1    ELSE CASE am.amname       WHEN 'hash' THEN 2      ELSE 3    END   END AS TYPE,   (information_schema._pg_expandarray(i.indkey)).n AS ORDINAL_POSITION,   ci.reltuples AS CARDINALITY,   ci.relpages AS PAGES,   pg_catalog.pg_get_expr(i.indpred, i.indrelid) AS FILTER_CONDITION,   ci.oid AS CI_OID,   i.indoption AS I_INDOPTION,   am.amcanorder AS AM_CANORDER,   d.description AS REMARKS FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON (ct.oid = i.indrelid)   JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid)   JOIN pg_catalog.pg_am am ON (ci.relam = am.oid)   LEFT JOIN pg_catalog.pg_description d ON (ci.oid = d.objoid) WHERE true  AND n.nspname = $1 AND ct.relname = $2) AS tmp ORDER BY "NON_UNIQUE", "TYPE", "INDEX_NAME", "ORDINAL_POSITION" ;

-- query: getTypeInfo()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getTypeInfo
-- protocol: extended
SELECT t.typname,t.oid FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON (t.typnamespace = n.oid)  WHERE n.nspname  != 'pg_toast' AND  (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid));

-- query: getTypeInfo(): TypeInfoCache.cacheSQLTypes()
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java getSQLTypeQuery(false)
-- protocol: extended
SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid   FROM pg_catalog.pg_type   LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  ORDER BY sp.r, pg_type.oid DESC;;

-- query: TypeInfoCache.getPGType(1034)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java prepareGetNameStatement
-- note: a result column of a type outside the driver's built-in list (aclitem[] here)
-- protocol: extended
-- params: [["int4", 1034]]
SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid WHERE t.oid = $1;

-- query: TypeInfoCache.getSQLType(1034)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java getSQLTypeQuery(true)
-- protocol: extended
-- params: [["int8", 1034]]
SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid   FROM pg_catalog.pg_type   LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  WHERE pg_type.oid = $1  ORDER BY sp.r, pg_type.oid DESC;;

-- query: setSchema('sales')
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java setSchema
-- protocol: extended
SET SESSION search_path TO 'sales';

-- query: getSchema() after setSchema
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java getSchema
-- protocol: extended
select current_schema();

-- query: setTransactionIsolation(TRANSACTION_SERIALIZABLE)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java setTransactionIsolation
-- protocol: extended
-- tolerate: 0A000 Materialize refuses SET TRANSACTION too; pgjdbc raises it from setTransactionIsolation, which a tool calls only when asked to change the level
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE;

-- query: setTransactionIsolation(TRANSACTION_READ_COMMITTED)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java setTransactionIsolation
-- protocol: extended
-- tolerate: 0A000 Materialize refuses SET TRANSACTION too; pgjdbc raises it from setTransactionIsolation, which a tool calls only when asked to change the level
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED;
