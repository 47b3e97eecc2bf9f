-- DBeaver's PostgreSQL plugin, server type Materialize (PostgreServerMaterialize), opening a connection and then schema sales
-- (its tables, a table's columns, constraints and indexes, a view's and a materialized view's
-- definition), in the order the plugin sends them with default settings. DBeaver opens a
-- Main and a Metadata connection, each through pgjdbc; this replays one. Statements are
-- the plugin's string concatenations for a server reporting 9.5.0; the version in the
-- application name is illustrative (DBUtils.getClientApplicationName's form).
-- {nspoid:x} and {reloid:s.x} stand for OIDs the client read from earlier answers.
-- startup: {"user": "materialize", "database": "materialize", "client_encoding": "UTF8", "DateStyle": "ISO", "TimeZone": "UTC"}
-- startup source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java getParametersForStartup (TimeZone is the JVM's zone: UTC here)

-- query: pgjdbc connect: runInitialQueries
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java runInitialQueries: a server below 12 (mzflow reports 9.5.0) gets extra_float_digits = 3; application_name is sent here because assumeMinServerVersion is unset; one simple-protocol Query
-- protocol: simple
SET extra_float_digits = 3;SET application_name = 'PostgreSQL JDBC Driver';

-- query: setClientInfo(ApplicationName)
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDataSource.java openConnection; pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java setClientInfo
-- protocol: extended
SET application_name = 'DBeaver 24.2.4 - Main <materialize>';

-- query: context defaults: current schema and user
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreExecutionContext.java refreshDefaults
-- protocol: extended
SELECT current_schema(),session_user;

-- query: schemas
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDatabase.java SchemaCache (MaterializeSchemaCache keeps its query)
-- protocol: extended
SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass
 ORDER BY nspname;

-- query: pgjdbc: the type name of a result column (aclitem[])
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java prepareGetNameStatement
-- protocol: extended
-- params: [["int4", 1034]]
SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid WHERE t.oid = $1;

-- query: pgjdbc: the SQL type of a result column (aclitem[])
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java getSQLTypeQuery(true)
-- protocol: extended
-- params: [["int8", 1034]]
SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid   FROM pg_catalog.pg_type   LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  WHERE pg_type.oid = $1  ORDER BY sp.r, pg_type.oid DESC;;

-- query: context defaults: search path
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreExecutionContext.java refreshDefaults
-- protocol: extended
SHOW search_path;

-- query: database info
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDatabase.java readDatabaseInfo
-- protocol: extended
-- params: [["varchar", "materialize"]]
SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname=$1;

-- query: setting standard_conforming_strings
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDataSource.java SettingCache
-- protocol: extended
-- params: [["varchar", "standard_conforming_strings"]]
select * from pg_catalog.pg_settings where name=$1;

-- query: dialect keywords (pgjdbc getSQLKeywords)
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getSQLKeywords; dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.model.jdbc/src/org/jkiss/dbeaver/model/impl/jdbc/JDBCSQLDialect.java loadDriverKeywords
-- protocol: extended
select string_agg(word, ',') from pg_catalog.pg_get_keywords() where word <> ALL ('{a,abs,absolute,action,ada,add,admin,after,all,allocate,alter,always,and,any,are,array,as,asc,asensitive,assertion,assignment,asymmetric,at,atomic,attribute,attributes,authorization,avg,before,begin,bernoulli,between,bigint,binary,blob,boolean,both,breadth,by,c,call,called,cardinality,cascade,cascaded,case,cast,catalog,catalog_name,ceil,ceiling,chain,char,char_length,character,character_length,character_set_catalog,character_set_name,character_set_schema,characteristics,characters,check,checked,class_origin,clob,close,coalesce,cobol,code_units,collate,collation,collation_catalog,collation_name,collation_schema,collect,column,column_name,command_function,command_function_code,commit,committed,condition,condition_number,connect,connection_name,constraint,constraint_catalog,constraint_name,constraint_schema,constraints,constructors,contains,continue,convert,corr,corresponding,count,covar_pop,covar_samp,create,cross,cube,cume_dist,current,current_collation,current_date,current_default_transform_group,current_path,current_role,current_time,current_timestamp,current_transform_group_for_type,current_user,cursor,cursor_name,cycle,data,date,datetime_interval_code,datetime_interval_precision,day,deallocate,dec,decimal,declare,default,defaults,deferrable,deferred,defined,definer,degree,delete,dense_rank,depth,deref,derived,desc,describe,descriptor,deterministic,diagnostics,disconnect,dispatch,distinct,domain,double,drop,dynamic,dynamic_function,dynamic_function_code,each,element,else,end,end-exec,equals,escape,every,except,exception,exclude,excluding,exec,execute,exists,exp,external,extract,false,fetch,filter,final,first,float,floor,following,for,foreign,fortran,found,free,from,full,function,fusion,g,general,get,global,go,goto,grant,granted,group,grouping,having,hierarchy,hold,hour,identity,immediate,implementation,in,including,increment,indicator,initially,inner,inout,input,insensitive,insert,instance,instantiable,int,integer,intersect,intersection,interval,into,invoker,is,isolation,join,k,key,key_member,key_type,language,large,last,lateral,leading,left,length,level,like,ln,local,localtime,localtimestamp,locator,lower,m,map,match,matched,max,maxvalue,member,merge,message_length,message_octet_length,message_text,method,min,minute,minvalue,mod,modifies,module,month,more,multiset,mumps,name,names,national,natural,nchar,nclob,nesting,new,next,no,none,normalize,normalized,not,"null",nullable,nullif,nulls,number,numeric,object,octet_length,octets,of,old,on,only,open,option,options,or,order,ordering,ordinality,others,out,outer,output,over,overlaps,overlay,overriding,pad,parameter,parameter_mode,parameter_name,parameter_ordinal_position,parameter_specific_catalog,parameter_specific_name,parameter_specific_schema,partial,partition,pascal,path,percent_rank,percentile_cont,percentile_disc,placing,pli,position,power,preceding,precision,prepare,preserve,primary,prior,privileges,procedure,public,range,rank,read,reads,real,recursive,ref,references,referencing,regr_avgx,regr_avgy,regr_count,regr_intercept,regr_r2,regr_slope,regr_sxx,regr_sxy,regr_syy,relative,release,repeatable,restart,result,return,returned_cardinality,returned_length,returned_octet_length,returned_sqlstate,returns,revoke,right,role,rollback,rollup,routine,routine_catalog,routine_name,routine_schema,row,row_count,row_number,rows,savepoint,scale,schema,schema_name,scope_catalog,scope_name,scope_schema,scroll,search,second,section,security,select,self,sensitive,sequence,serializable,server_name,session,session_user,set,sets,similar,simple,size,smallint,some,source,space,specific,specific_name,specifictype,sql,sqlexception,sqlstate,sqlwarning,sqrt,start,state,statement,static,stddev_pop,stddev_samp,structure,style,subclass_origin,submultiset,substring,sum,symmetric,system,system_user,table,table_name,tablesample,temporary,then,ties,time,timestamp,timezone_hour,timezone_minute,to,top_level_count,trailing,transaction,transaction_active,transactions_committed,transactions_rolled_back,transform,transforms,translate,translation,treat,trigger,trigger_catalog,trigger_name,trigger_schema,trim,true,type,uescape,unbounded,uncommitted,under,union,unique,unknown,unnamed,unnest,update,upper,usage,user,user_defined_type_catalog,user_defined_type_code,user_defined_type_name,user_defined_type_schema,using,value,values,var_pop,var_samp,varchar,varying,view,when,whenever,where,width_bucket,window,with,within,without,work,write,year,zone}'::text[]);

-- query: server version
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDataSource.java initialize
-- protocol: extended
SELECT version();

-- query: does pg_class have reltype
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDataSource.java initialize; dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/PostgreUtils.java isMetaObjectExists
-- protocol: extended
SELECT reltype FROM pg_catalog.pg_class WHERE 1<>1 LIMIT 1;

-- query: does pg_type have typcategory
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDatabase.java supportsSysTypCategoryColumn (8.4 to 9.x)
-- protocol: extended
SELECT typcategory FROM pg_catalog.pg_type WHERE 1<>1 LIMIT 1;

-- query: data types
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDatabase.java cacheDataTypes (typcategory present)
-- protocol: extended
SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description
FROM pg_catalog.pg_type t
LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem 
LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid
WHERE t.typname IS NOT NULL
AND (c.relkind IS NULL OR c.relkind = 'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C');

-- query: make sales the default schema
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreExecutionContext.java setSearchPath
-- protocol: extended
SET search_path = sales,public;

-- query: tables of sales
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreSchema.java TableCache.prepareLookupStatement (below 10)
-- protocol: extended
-- params: [["int8", "{nspoid:sales}"]]
SELECT c.oid,c.*,d.description
FROM pg_catalog.pg_class c
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass
WHERE c.relnamespace=$1 AND c.relkind not in ('i','I','c');

-- query: columns of sales' tables
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreSchema.java TableCache.prepareChildrenStatement (Materialize: no sequences, so no pg_depend join)
-- protocol: extended
-- params: [["int8", "{nspoid:sales}"]]
SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description
FROM pg_catalog.pg_attribute a
INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.relnamespace=$1
ORDER BY a.attnum;

-- query: columns of orders
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreSchema.java TableCache.prepareChildrenStatement
-- protocol: extended
-- params: [["int8", "{reloid:sales.orders}"]]
SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description
FROM pg_catalog.pg_attribute a
INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid=$1
ORDER BY a.attnum;

-- query: constraints of orders
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreSchema.java ConstraintCache
-- protocol: extended
-- params: [["int8", "{reloid:sales.orders}"]]
SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,d.description, case when c.contype='c' then "substring"(pg_get_constraintdef(c.oid), 7) else null end consrc_copy
FROM pg_catalog.pg_constraint c
INNER JOIN pg_catalog.pg_class t ON t.oid=c.conrelid
LEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.confrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_constraint'::regclass
WHERE c.conrelid=$1
ORDER BY c.oid;

-- query: indexes of orders
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreSchema.java IndexCache (Materialize: no relation sizes)
-- protocol: extended
-- params: [["int8", "{reloid:sales.orders}"]]
SELECT i.*,i.indkey as keys,c.relname,c.relnamespace,c.relam,c.reltablespace,tc.relname as tabrelname,dsc.description,pg_catalog.pg_get_expr(i.indpred, i.indrelid) as pred_expr,pg_catalog.pg_get_expr(i.indexprs, i.indrelid, true) as expr
FROM pg_catalog.pg_index i
INNER JOIN pg_catalog.pg_class c ON c.oid=i.indexrelid
INNER JOIN pg_catalog.pg_class tc ON tc.oid=i.indrelid
LEFT OUTER JOIN pg_catalog.pg_description dsc ON i.indexrelid=dsc.objoid
WHERE  i.indrelid=$1 ORDER BY c.relname;

-- query: access methods (an index's)
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreDatabase.java AccessMethodCache
-- protocol: extended
SELECT am.oid,am.* FROM pg_catalog.pg_am am 
ORDER BY am.oid;

-- query: an index's DDL
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreIndex.java getObjectDefinitionText
-- protocol: extended
-- params: [["int8", "{reloid:sales.orders_customer}"]]
SELECT pg_catalog.pg_get_indexdef($1);

-- query: a view's definition
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreViewBase.java fetchViewQueryResultIfItNull (the OID inlined)
-- protocol: extended
SELECT pg_get_viewdef({reloid:sales.big_orders}, true);

-- query: a materialized view's definition
-- source: dbeaver/dbeaver@2428359b748778a5a345432906ab3da69289c20c plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/model/PostgreViewBase.java fetchViewQueryResultIfItNull
-- protocol: extended
SELECT pg_get_viewdef({reloid:sales.totals}, true);
